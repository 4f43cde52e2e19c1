//! [`Placement`]: the device of every worker, and [`DeviceIndex`], the typed device id.

use std::fmt;

use pipetrain_schedules::WorkerId;
use serde::{Deserialize, Serialize};

use crate::error::{PartitionError, Result};

/// A device, as an index into the device list the user hands to the pipeline.
///
/// This crate knows no device types; the engine resolves the index against its own list.
///
/// ```
/// use pipetrain_partitioner::DeviceIndex;
/// assert_eq!(DeviceIndex::from(3).to_string(), "device 3");
/// assert_eq!(DeviceIndex(3).index(), 3);
/// ```
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct DeviceIndex(pub u32);

impl DeviceIndex {
    /// The id as an index into the device list.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl From<usize> for DeviceIndex {
    /// # Panics
    /// If `i` does not fit in a `u32`.
    fn from(i: usize) -> Self {
        Self(u32::try_from(i).expect("DeviceIndex out of range"))
    }
}

impl fmt::Display for DeviceIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.0)
    }
}

/// The device of every worker of a `replicas × stages` world.
///
/// Stored replica-major: worker `(r, s)` has rank `r · stages + s` (as [`WorkerId::rank`]). Every
/// constructor validates the shape, so [`device`](Self::device) is total over the world's workers.
/// Several workers may share a device.
///
/// ```
/// use pipetrain_partitioner::{DeviceIndex, Placement};
/// use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
///
/// // Two replicas of a 2-stage pipeline on 2 devices: each replica spans both devices.
/// let placement = Placement::round_robin(2, 2, 2)?;
/// assert_eq!(placement.to_string(), "[0 1 | 0 1]");
/// assert_eq!(placement.device(WorkerId::new(ReplicaId(1), StageId(0))), DeviceIndex(0));
/// # Ok::<(), pipetrain_partitioner::PartitionError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PlacementData", into = "PlacementData")]
pub struct Placement {
    replicas: usize,
    stages: usize,
    /// One device per worker, replica-major.
    devices: Vec<DeviceIndex>,
}

impl Placement {
    /// Every worker on device 0: the single-device (CPU) default.
    pub fn single_device(replicas: usize, stages: usize) -> Result<Self> {
        let workers = world(replicas, stages)?;
        Ok(Self {
            replicas,
            stages,
            devices: vec![DeviceIndex(0); workers],
        })
    }

    /// Worker of rank `r = replica · stages + stage` on device `r % devices`.
    ///
    /// With `devices = replicas · stages` every worker gets its own device; with
    /// `devices = stages` every replica spans all devices and stage `s` of each replica lands on
    /// device `s`.
    pub fn round_robin(replicas: usize, stages: usize, devices: usize) -> Result<Self> {
        let workers = world(replicas, stages)?;
        if devices == 0 {
            return Err(PartitionError::NoDevices { workers });
        }
        Ok(Self {
            replicas,
            stages,
            devices: (0..workers)
                .map(|r| DeviceIndex::from(r % devices))
                .collect(),
        })
    }

    /// The given device for every worker, listed replica-major (all stages of replica 0, then of
    /// replica 1, …); `devices` must hold exactly `replicas · stages` entries.
    ///
    /// ```
    /// use pipetrain_partitioner::{DeviceIndex, Placement};
    ///
    /// let err = Placement::explicit(2, 2, vec![DeviceIndex(0); 3]).unwrap_err();
    /// assert!(err.to_string().contains("lists 3 devices but 2 replicas × 2 stages make 4 workers"));
    /// ```
    pub fn explicit(replicas: usize, stages: usize, devices: Vec<DeviceIndex>) -> Result<Self> {
        let workers = world(replicas, stages)?;
        if devices.len() != workers {
            return Err(PartitionError::PlacementLength {
                replicas,
                stages,
                expected: workers,
                given: devices.len(),
            });
        }
        Ok(Self {
            replicas,
            stages,
            devices,
        })
    }

    /// The device of `worker`.
    ///
    /// # Panics
    /// If `worker` is outside this placement's `replicas × stages` world.
    pub fn device(&self, worker: WorkerId) -> DeviceIndex {
        assert!(
            worker.replica.index() < self.replicas && worker.stage.index() < self.stages,
            "{worker} is outside this placement of {} replicas × {} stages",
            self.replicas,
            self.stages
        );
        self.devices[worker.rank(self.stages)]
    }

    /// Number of replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Number of stages per replica.
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// How long the user's device list must be: one more than the largest index used.
    pub fn devices_needed(&self) -> usize {
        self.devices
            .iter()
            .map(|d| d.index() + 1)
            .max()
            .unwrap_or(0)
    }

    /// Every worker with its device, in rank (replica-major) order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (WorkerId, DeviceIndex)> + '_ {
        self.devices
            .iter()
            .enumerate()
            .map(|(rank, &device)| (WorkerId::from_rank(rank, self.stages), device))
    }

    /// The workers placed on `device`, in rank order.
    pub fn workers_on(&self, device: DeviceIndex) -> impl Iterator<Item = WorkerId> + '_ {
        self.iter()
            .filter(move |&(_, d)| d == device)
            .map(|(worker, _)| worker)
    }
}

/// Checks the world shape and returns its number of workers.
fn world(replicas: usize, stages: usize) -> Result<usize> {
    if replicas == 0 || stages == 0 {
        return Err(PartitionError::EmptyWorld { replicas, stages });
    }
    Ok(replicas
        .checked_mul(stages)
        .expect("replicas × stages overflows usize"))
}

impl fmt::Display for Placement {
    /// `[0 1 | 2 3]`: the device index of each stage, one `|`-separated group per replica.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (replica, devices) in self.devices.chunks(self.stages).enumerate() {
            if replica > 0 {
                f.write_str(" | ")?;
            }
            for (stage, device) in devices.iter().enumerate() {
                if stage > 0 {
                    f.write_str(" ")?;
                }
                write!(f, "{}", device.0)?;
            }
        }
        f.write_str("]")
    }
}

/// The serialized form of a [`Placement`], validated on the way in.
#[derive(Serialize, Deserialize)]
struct PlacementData {
    replicas: usize,
    stages: usize,
    devices: Vec<DeviceIndex>,
}

impl TryFrom<PlacementData> for Placement {
    type Error = PartitionError;

    fn try_from(data: PlacementData) -> Result<Self> {
        Self::explicit(data.replicas, data.stages, data.devices)
    }
}

impl From<Placement> for PlacementData {
    fn from(placement: Placement) -> Self {
        Self {
            replicas: placement.replicas,
            stages: placement.stages,
            devices: placement.devices,
        }
    }
}
