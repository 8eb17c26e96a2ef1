//! `make bench`: scale benchmarks against a fresh local control plane, printing numbers.
//! Usage: cargo bench --bench scale -- [nodes] [pods] [webhook] [--quick]

mod harness;
mod nodes;

use std::time::Duration;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let quick = args.iter().any(|a| a == "--quick");
    let picked: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with("--")).collect();
    let all = picked.is_empty();
    println!("# kwok-pools benchmarks{}", if quick { " (quick)" } else { "" });
    let sizes: Vec<u32> = picked
        .iter()
        .filter_map(|a| a.strip_prefix("nodes="))
        .flat_map(|v| v.split(','))
        .filter_map(|v| v.parse().ok())
        .collect();
    if !sizes.is_empty() {
        nodes::run(&sizes, Duration::from_secs(if quick { 20 } else { 120 })).await;
    } else if all || picked.contains(&"nodes") {
        if quick {
            nodes::run(&[200], Duration::from_secs(20)).await;
        } else {
            nodes::run(&[1000, 5000], Duration::from_secs(120)).await;
        }
    }
}
