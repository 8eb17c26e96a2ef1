//! Sharding the simulator over replicas: each renews a membership Lease; nodes (and the pods
//! and VMIs on them) go to live members by rendezvous hashing of the node name.

pub mod config;
pub mod members;
pub mod membership;
pub mod rendezvous;
pub mod renewal;
pub mod view;

pub use view::{Ownership, Shard};
