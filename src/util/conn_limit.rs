//! Open connections counted per client IP address, for the `*_max_conns_per_client` limits
//! of both ports: [`PerClient::take`] hands out a [`ClientSlot`] while the address holds
//! fewer than the limit, and the slot gives its place back when dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The open connections of each client address.
#[derive(Debug, Default)]
pub struct PerClient {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its address until dropped.
#[derive(Debug)]
pub struct ClientSlot {
    table: Arc<PerClient>,
    ip: IpAddr,
}

impl PerClient {
    /// A slot for a connection from `ip`, unless it already holds `limit` (0: no limit).
    pub fn take(self: &Arc<Self>, ip: IpAddr, limit: usize) -> Option<ClientSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_default();
        if limit != 0 && *n >= limit {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_limit_and_a_dropped_slot_frees_a_place() {
        let table = Arc::new(PerClient::default());
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..2).map(|_| table.take(a, 2).unwrap()).collect();
        assert!(table.take(a, 2).is_none());
        assert!(table.take(b, 2).is_some());
        drop(held);
        assert!(table.take(a, 2).is_some());
        assert!((0..1000).all(|_| table.take(a, 0).map(std::mem::forget).is_some()));
    }
}
