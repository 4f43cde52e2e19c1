//! The interpreter's hand-off of the activations it sends (`worker/interpreter.rs`'s send
//! action), observed on a CPU through a whole runtime: under the forced device hand-off the
//! transport must get copies nobody else holds (issue 48 item 1).

use std::sync::{Arc, Mutex};

use burn::nn::LinearConfig;
use burn::prelude::*;
use pipetrain_partitioner::Partition;

use crate::Handoff;
use crate::adapter::sole_holder;
use crate::comm::abort::Abort;
use crate::comm::fabric::{ChannelFabric, Fabric, Links, TieLink};
use crate::comm::transport::{Flow, Tag, Transport};
use crate::error::{EngineError, Result};
use crate::model::activation::Activation;
use crate::model::batch::Batch;
use crate::optim::optimizer::OptimizerConfig;
use crate::runtime::Runtime;
use crate::runtime::prepared::Prepared;
use crate::runtime::prepared::tests::{Plain, config};
use crate::runtime::workers::Workers;
use crate::world::World;
use pipetrain_schedules::SkipRoute;

/// Whether each activation sent was the only handle of its buffer, as the transport got it.
type Seen = Arc<Mutex<Vec<Option<bool>>>>;

/// A transport that reads each activation's holder count before passing it on.
struct Reading {
    inner: Box<dyn Transport>,
    seen: Seen,
}

impl Transport for Reading {
    fn send(&mut self, tag: Tag, payload: Activation) -> Result<(), EngineError> {
        let payload = match tag.flow {
            Flow::Activation => {
                let (t, sole) = sole_holder(payload.float::<2>()?);
                self.seen.lock().unwrap().push(sole);
                t.into()
            }
            _ => payload,
        };
        self.inner.send(tag, payload)
    }

    fn recv(&mut self, tag: Tag) -> Result<Activation, EngineError> {
        self.inner.recv(tag)
    }
}

/// In-process channels whose transports are [`Reading`].
struct ReadingFabric(Seen);

impl Fabric for ReadingFabric {
    fn connect(
        &mut self,
        world: &World,
        ties: &[TieLink],
        skips: &[SkipRoute],
        abort: &Arc<Abort>,
    ) -> Result<Vec<Links>> {
        let links = ChannelFabric::default().connect(world, ties, skips, abort)?;
        Ok(links
            .into_iter()
            .map(|mut l| {
                l.transport = Box::new(Reading {
                    inner: l.transport,
                    seen: Arc::clone(&self.0),
                });
                l
            })
            .collect())
    }
}

/// The holder counts of the activations stage 0 sends in one step under `handoff`.
fn sent(handoff: Handoff) -> Vec<Option<bool>> {
    let device = Device::flex();
    let model = vec![
        Plain {
            linear: LinearConfig::new(3, 4).init(&device),
        },
        Plain {
            linear: LinearConfig::new(4, 2).init(&device),
        },
    ];
    let split = Partition::from_balance(&[1, 1], 2).unwrap();
    let world = World::new(1, 2).unwrap();
    let workers = Workers::build(
        world,
        split,
        &model,
        std::slice::from_ref(&device),
        &OptimizerConfig::sgd(),
        1,
    )
    .unwrap();
    let seen = Seen::default();
    let prepared = Prepared::new(workers, config(handoff)).unwrap();
    let mut runtime = Runtime::new(prepared, Box::new(ReadingFabric(Arc::clone(&seen)))).unwrap();
    let batch = Batch {
        inputs: Tensor::<2>::ones([4, 3], &device).into(),
        targets: Tensor::<2>::zeros([4, 2], &device).into(),
    };
    runtime.step(&batch).unwrap();
    seen.lock().unwrap().clone()
}

/// The interpreter hands each activation it sends to [`Handoff::outgoing`]: forced on a CPU
/// (`Handoff::DeviceOnCpuToo`), the transport gets a copy nobody else holds; passing handles
/// (the host hand-off on a CPU), it gets the stage's output, which the stage still holds for
/// its backward.
#[test]
fn sent_activations_are_copies_under_the_device_handoff() {
    assert_eq!(
        sent(Handoff::DeviceOnCpuToo),
        [Some(true); 2],
        "an activation sent shares the sender's buffer: the interpreter did not hand it off"
    );
    assert_eq!(
        sent(Handoff::Host),
        [Some(false); 2],
        "on a CPU the host hand-off passes the handle"
    );
}
