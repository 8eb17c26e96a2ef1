//! What the kubelet reports, computed apart from sending it (as `pkg/kubelet/status`): the
//! node's status ([`node`]) and where its API answers ([`endpoint`]), reads of a pod's status
//! ([`pod`]) and the patches the kubelet writes for it ([`patches`]), each pod's fate under its
//! knobs ([`fate`]), whether the kubelet admits a pod bound to its node ([`admission`]), the answer to an in-place resize ([`resize`]), what a container uses
//! ([`usage`]) and the images a node lists ([`images`]). Pure: no I/O, no clock (the time is given).

pub mod admission;
pub mod cloud;
pub mod endpoint;
pub mod eviction;
pub mod fate;
pub mod images;
pub mod node;
pub mod patches;
pub mod pod;
pub mod rejection;
pub mod resize;
pub mod usage;
