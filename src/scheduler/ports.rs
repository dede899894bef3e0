//! Host ports as a scheduled resource (Nomad's `NetworkIndex`, host mode): a group's network
//! asks for static ports (a fixed host port) and dynamic ones (any free port of the node's
//! dynamic range). A node takes the group when it has an address, none of the static ports
//! is in use or reserved by the node, and enough of its dynamic range is free; the scheduler
//! then picks the dynamic ports with its RNG (20 random tries each, then a scan, as Nomad),
//! and the plan applier re-checks that no two live allocations on a node hold one port.
//!
//! Pure: the ports in use come from [`crate::scheduler::context::EvalContext`] (or the
//! applier's view), randomness from the caller.

use std::collections::HashSet;

use rand::{Rng, RngCore};
use teamster_storage::model::{parse_port_ranges, AllocatedPortMapping, NetworkResource, Node};

/// Random picks per dynamic port before the range is scanned (Nomad's `maxRandPortAttempts`).
const RANDOM_TRIES: usize = 20;

/// The address a node's ports are bound on: its first network's IP.
pub fn node_ip(node: &Node) -> Option<&str> {
    node.node_resources
        .networks
        .iter()
        .map(|n| n.ip.as_str())
        .find(|ip| !ip.is_empty())
}

/// The host ports a node keeps from allocations (its `reserved_host_ports`; a list that does
/// not parse reserves nothing, since the client validated it before registering).
pub fn node_reserved_ports(node: &Node) -> Vec<u32> {
    parse_port_ranges(&node.reserved_resources.networks.reserved_host_ports).unwrap_or_default()
}

/// The node's dynamic range, `min..=max` (Nomad's 20000..=32000 when the node gives none).
fn dynamic_range(node: &Node) -> (u32, u32) {
    let r = &node.node_resources;
    if r.min_dynamic_port == 0 || r.max_dynamic_port < r.min_dynamic_port {
        (20000, 32000)
    } else {
        (r.min_dynamic_port, r.max_dynamic_port.min(65535))
    }
}

/// Whether `ask` can be placed on `node` with `used` host ports taken (allocations' and the
/// node's reserved ones); the reason otherwise, as Nomad words it after `network: `.
pub fn check(ask: &NetworkResource, node: &Node, used: &HashSet<u32>) -> Result<(), String> {
    if node_ip(node).is_none() {
        return Err("no networks available".into());
    }
    for port in &ask.reserved_ports {
        if used.contains(&port.value) {
            return Err(format!(
                "reserved port collision {}={}",
                port.label, port.value
            ));
        }
    }
    if ask.dynamic_ports.is_empty() {
        return Ok(());
    }
    let (lo, hi) = dynamic_range(node);
    let statics: HashSet<u32> = ask.reserved_ports.iter().map(|p| p.value).collect();
    let free = (lo..=hi)
        .filter(|p| !used.contains(p) && !statics.contains(p))
        .take(ask.dynamic_ports.len())
        .count();
    if free < ask.dynamic_ports.len() {
        return Err("dynamic port selection failed".into());
    }
    Ok(())
}

/// The ports `ask` gets on `node`: static ones as asked, dynamic ones picked from the free
/// part of the range. Fails as [`check`] does.
pub fn assign(
    ask: &NetworkResource,
    node: &Node,
    used: &HashSet<u32>,
    rng: &mut dyn RngCore,
) -> Result<Vec<AllocatedPortMapping>, String> {
    check(ask, node, used)?;
    let ip = node_ip(node).unwrap_or_default().to_string();
    let mut taken: HashSet<u32> = ask.reserved_ports.iter().map(|p| p.value).collect();
    let mut out: Vec<AllocatedPortMapping> = ask
        .reserved_ports
        .iter()
        .map(|p| AllocatedPortMapping {
            label: p.label.clone(),
            value: p.value,
            to: p.to,
            host_ip: ip.clone(),
        })
        .collect();
    let (lo, hi) = dynamic_range(node);
    let free = |p: &u32, taken: &HashSet<u32>| !used.contains(p) && !taken.contains(p);
    for port in &ask.dynamic_ports {
        let random = (0..RANDOM_TRIES)
            .map(|_| rng.gen_range(lo..=hi))
            .find(|p| free(p, &taken));
        let value = match random {
            Some(p) => p,
            None => (lo..=hi)
                .find(|p| free(p, &taken))
                .ok_or_else(|| "dynamic port selection failed".to_string())?,
        };
        taken.insert(value);
        out.push(AllocatedPortMapping {
            label: port.label.clone(),
            value,
            to: port.to,
            host_ip: ip.clone(),
        });
    }
    Ok(out)
}

/// The first host port held twice among `held` (each allocation's ports, the node's reserved
/// ones as one more entry), if any.
pub fn first_collision<'a>(held: impl IntoIterator<Item = &'a [u32]>) -> Option<u32> {
    let mut seen = HashSet::new();
    held.into_iter()
        .flat_map(|ports| ports.iter().copied())
        .find(|p| !seen.insert(*p))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use teamster_storage::model::{NodeNetworkResource, Port};

    use super::*;

    fn node(min: u32, max: u32) -> Node {
        let mut n = Node::default();
        n.node_resources.min_dynamic_port = min;
        n.node_resources.max_dynamic_port = max;
        n.node_resources.networks = vec![NodeNetworkResource {
            mode: "host".into(),
            ip: "10.0.0.5".into(),
            ..Default::default()
        }];
        n
    }

    fn ask(statics: &[(&str, u32)], dynamics: &[&str]) -> NetworkResource {
        let port = |label: &str, value| Port {
            label: label.into(),
            value,
            ..Default::default()
        };
        NetworkResource {
            mode: "host".into(),
            reserved_ports: statics.iter().map(|(l, v)| port(l, *v)).collect(),
            dynamic_ports: dynamics.iter().map(|l| port(l, 0)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_static_port_in_use_is_a_collision_named_by_label() {
        let n = node(20000, 20010);
        let used: HashSet<u32> = [8080].into();
        assert_eq!(
            check(&ask(&[("http", 8080)], &[]), &n, &used),
            Err("reserved port collision http=8080".into())
        );
        assert_eq!(check(&ask(&[("http", 8081)], &[]), &n, &used), Ok(()));
    }

    #[test]
    fn a_node_without_an_address_takes_no_network() {
        let mut n = node(20000, 20010);
        n.node_resources.networks.clear();
        assert_eq!(
            check(&ask(&[], &["http"]), &n, &HashSet::new()),
            Err("no networks available".into())
        );
    }

    #[test]
    fn dynamic_ports_are_distinct_free_and_in_range() {
        let n = node(20000, 20003);
        let used: HashSet<u32> = [20001].into();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let got = assign(&ask(&[("db", 5432)], &["a", "b", "c"]), &n, &used, &mut rng).unwrap();
        let values: Vec<u32> = got.iter().map(|p| p.value).collect();
        assert_eq!(values[0], 5432);
        let mut dynamic: Vec<u32> = values[1..].to_vec();
        dynamic.sort();
        assert_eq!(dynamic, [20000, 20002, 20003]);
        assert!(got.iter().all(|p| p.host_ip == "10.0.0.5"));
        // One more than the free part of the range fails, by check and by assign.
        let too_many = ask(&[], &["a", "b", "c", "d"]);
        assert_eq!(
            check(&too_many, &n, &used),
            Err("dynamic port selection failed".into())
        );
        assert!(assign(&too_many, &n, &used, &mut rng).is_err());
    }

    #[test]
    fn a_dynamic_port_never_takes_the_groups_own_static_port() {
        let n = node(30000, 30001);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..20 {
            let got = assign(&ask(&[("s", 30000)], &["d"]), &n, &HashSet::new(), &mut rng).unwrap();
            assert_eq!(got[1].value, 30001);
        }
    }

    #[test]
    fn collisions_are_found_across_allocations() {
        assert_eq!(first_collision([&[1, 2][..], &[3][..]]), None);
        assert_eq!(first_collision([&[1, 2][..], &[3, 2][..]]), Some(2));
    }

    #[test]
    fn reserved_ports_parse_lists_and_ranges() {
        let mut n = node(0, 0);
        n.reserved_resources.networks.reserved_host_ports = "22, 80,8000-8002".into();
        assert_eq!(node_reserved_ports(&n), [22, 80, 8000, 8001, 8002]);
        assert_eq!(dynamic_range(&n), (20000, 32000));
    }
}
