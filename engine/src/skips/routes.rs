//! Where each skip goes: the skips whose stashing and popping layers sit on different stages,
//! by stage pair. The stashing stage takes them out of its output and sends them straight to
//! the popping stage, which adds them to its input; the gradients go straight back (see
//! `pipetrain_schedules::route_skips` for the plan's side).

use pipetrain_partitioner::Partition;
use pipetrain_schedules::{SkipRoute, StageId};

use crate::model::layer::Layer;

/// One skip that crosses stages.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Routed {
    name: String,
    route: SkipRoute,
}

/// The skips of a model that cross stage boundaries under a partition.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_engine::{Activation, EngineError, Layer, SkipRoutes};
/// use pipetrain_partitioner::Partition;
/// use pipetrain_schedules::{SkipRoute, StageId};
///
/// #[derive(Module, Debug)]
/// struct L { level: usize, up: bool } // down `level` stashes `s{level}`, up pops it
/// impl Layer for L {
///     fn forward(&self, x: Activation) -> Result<Activation, EngineError> { Ok(x) }
///     fn stashes(&self) -> Vec<String> { if self.up { vec![] } else { vec![format!("s{}", self.level)] } }
///     fn pops(&self) -> Vec<String> { if self.up { vec![format!("s{}", self.level)] } else { vec![] } }
/// }
/// let layer = |level, up| L { level, up };
/// // down 0, down 1 | up 1 | up 0: s0 goes 0 → 2, s1 0 → 1; nothing passes through stage 1.
/// let model = [layer(0, false), layer(1, false), layer(1, true), layer(0, true)];
/// let routes = SkipRoutes::new(&model, &Partition::from_balance(&[2, 1, 1], 4).unwrap());
/// let (near, far) = ("0:1".parse().unwrap(), "0:2".parse().unwrap());
/// assert_eq!(routes.pairs(), [near, far]);
/// assert_eq!(routes.names(far), ["s0"]);
/// assert_eq!(routes.stashed_on(StageId(0)), [near, far]);
/// assert_eq!(routes.popped_on(StageId(1)), [near]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkipRoutes {
    routes: Vec<Routed>,
}

impl SkipRoutes {
    /// The skips of `model` that `partition` cuts: each name's first stash and its first later
    /// pop on another stage (unpaired skips are [`check_skips`](crate::check_skips)'s to
    /// report; they route nothing).
    pub fn new<L: Layer>(model: &[L], partition: &Partition) -> Self {
        let stage_of = |layer: usize| {
            StageId::range(partition.stages()).find(|&s| partition.range(s).contains(&layer))
        };
        let mut routes = Vec::new();
        for (i, layer) in model.iter().enumerate() {
            for name in layer.stashes() {
                let pop = model[i + 1..]
                    .iter()
                    .position(|l| l.pops().contains(&name))
                    .map(|p| p + i + 1);
                let (Some(stash), Some(pop)) = (stage_of(i), pop.and_then(stage_of)) else {
                    continue;
                };
                if stash < pop {
                    routes.push(Routed {
                        name,
                        route: SkipRoute { stash, pop },
                    });
                }
            }
        }
        routes.sort_by(|a, b| (a.route, &a.name).cmp(&(b.route, &b.name)));
        Self { routes }
    }

    /// The stage pairs that exchange skips, in order.
    pub fn pairs(&self) -> Vec<SkipRoute> {
        let mut pairs: Vec<SkipRoute> = self.routes.iter().map(|r| r.route).collect();
        pairs.dedup();
        pairs
    }

    /// The names of the skips `route` carries, in order.
    pub fn names(&self, route: SkipRoute) -> Vec<&str> {
        self.routes
            .iter()
            .filter(|r| r.route == route)
            .map(|r| r.name.as_str())
            .collect()
    }

    /// The routes whose skips `stage` stashes (and sends).
    pub fn stashed_on(&self, stage: StageId) -> Vec<SkipRoute> {
        self.pairs()
            .into_iter()
            .filter(|r| r.stash == stage)
            .collect()
    }

    /// The routes whose skips `stage` pops (and receives).
    pub fn popped_on(&self, stage: StageId) -> Vec<SkipRoute> {
        self.pairs()
            .into_iter()
            .filter(|r| r.pop == stage)
            .collect()
    }
}
