//! The node worker end to end under tokio's paused clock, against the fixtures' world: when a
//! simulated node's Lease is written, how the cadence stretches while the simulator's writes
//! queue, and how a node follows the shard.

use super::renewal::Stretch;
use super::{NodeSimConfig, NodeSimulator};
use crate::ipam::HostAllocator;
use crate::kubelet::fixtures::{World, node, pass, settle, world};
use crate::kubelet::status::node::NodeDefaults;
use crate::shard::Shard;
use crate::shard::view::Ownership;
use crate::simulator::lifecycle::Lifecycles;
use crate::simulator::machinery::{Class, WriteBudget};
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::Metrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(40);

/// A world with node `n1` and the node worker running on it with `writes` and `shard`.
async fn running(writes: WriteBudget, shard: Shard) -> (World, Arc<Metrics>) {
    let (world, client, _pods, nodes) = world();
    world.put_node(node("n1"));
    let metrics = Arc::new(Metrics::default());
    let sim = NodeSimulator {
        client,
        config: NodeSimConfig {
            manage: Manage::from_flags(false, None, None, None).unwrap(),
            lease_duration: LEASE,
            status_frequency: Duration::from_secs(300),
            defaults: NodeDefaults::default(),
            clock: world.clock,
        },
        nodes: world.nodes.clone(),
        addresses: Arc::new(Mutex::new(HostAllocator::new("100.64.0.0/16".parse().unwrap()))),
        metrics: metrics.clone(),
        writes,
        lifecycles: Lifecycles::default(),
        shard,
        identity: None,
        kubelet: None,
        stretch: Stretch::default(),
        images: None,
        image_news: None,
    };
    tokio::spawn(sim.run(nodes));
    settle().await;
    (world, metrics)
}

/// The gaps between the node's Lease writes, in whole seconds.
fn gaps(world: &World) -> Vec<u64> {
    let at: Vec<Duration> = world.lease_writes("n1").iter().map(|w| w.at).collect();
    at.windows(2).map(|w| (w[1] - w[0]).as_secs()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_new_node_gets_its_lease_at_once_then_a_renewal_every_quarter_of_its_duration() {
    let (world, _) = running(WriteBudget::new(8), Shard::whole()).await;
    let first = world.lease_writes("n1");
    assert_eq!((first.len(), first[0].method.as_str()), (1, "POST"), "the Lease is made at once");
    assert_eq!(first[0].body["spec"]["leaseDurationSeconds"], 40);
    let status = world.writes().into_iter().filter(|w| w.path == "/api/v1/nodes/n1/status").count();
    assert_eq!(status, 1, "a node without a kubelet's status gets one");
    pass(Duration::from_secs(62)).await;
    let gaps = gaps(&world);
    // Every 10s, jittered down to 8.5s so renewals do not come in waves.
    assert!((6..=8).contains(&gaps.len()) && gaps.iter().all(|g| (8..=10).contains(g)), "{gaps:?}");
}

/// Holds `n` writes of the other class in the budget until `release` is notified.
fn hold(writes: &WriteBudget, n: usize, release: &Arc<tokio::sync::Notify>) {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let others = writes.writes(Class::Other, tx);
    for _ in 0..n {
        let release = release.clone();
        others.spawn(move || async move { release.notified().await });
    }
}

#[tokio::test(start_paused = true)]
async fn renewals_stretch_while_the_writes_queue_and_return_to_the_kubelets_cadence() {
    let writes = WriteBudget::new(4); // 3 places for other writes, 1 kept for heartbeats
    let release = Arc::new(tokio::sync::Notify::new());
    let (world, metrics) = running(writes.clone(), Shard::whole()).await;
    pass(Duration::from_secs(1)).await;
    // A backlog: 3 writes in flight, 3 more waiting (pressure 1).
    hold(&writes, 6, &release);
    pass(Duration::from_secs(90)).await;
    let stretched = gaps(&world);
    assert!(writes.pressure() >= 1.0);
    // Stretched toward 60% of the lease (24s), never past it: the node stays alive.
    assert!(stretched.iter().all(|g| *g <= 24) && stretched.iter().skip(1).all(|g| *g >= 18), "{stretched:?}");
    assert!(metrics.deferred_lease_renewals.get() > 0);
    // The backlog drains: back to every 10s.
    release.notify_waiters();
    settle().await;
    let before = world.lease_writes("n1").len();
    pass(Duration::from_secs(60)).await;
    let after = &gaps(&world)[before..];
    assert!(after.len() >= 5 && after.iter().skip(1).all(|g| (8..=10).contains(g)), "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_node_handed_to_another_replica_is_no_longer_renewed_here_and_is_renewed_at_once_when_back() {
    let (view, rx) = tokio::sync::watch::channel(Arc::new(Ownership::settled("a", vec!["a".into()])));
    let (world, _) = running(WriteBudget::new(8), Shard::new(rx)).await;
    pass(Duration::from_secs(15)).await;
    let before = world.lease_writes("n1").len();
    assert!(before >= 2);
    view.send_replace(Arc::new(Ownership::settled("a", vec!["b".into()])));
    pass(Duration::from_secs(60)).await;
    assert_eq!(world.lease_writes("n1").len(), before, "replica b renews it now, never a as well");
    view.send_replace(Arc::new(Ownership::settled("a", vec!["a".into()])));
    settle().await;
    // Renewed at once when it comes back (its lease may be old): a take-over writes the
    // Lease whole (a create, refused since it exists, then a patch naming it ours).
    let back = &world.lease_writes("n1")[before..];
    let shown: Vec<(u64, &str)> = back.iter().map(|w| (w.at.as_secs(), w.method.as_str())).collect();
    assert_eq!(shown, [(75, "POST"), (75, "PATCH")]);
    assert_eq!(back[1].body["spec"]["holderIdentity"], "n1");
}
