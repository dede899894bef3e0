//! Peer addresses as configuration files and flags give them, and the connection type of
//! HTTP dialled by hand (plain TCP or TLS behind one box).

use std::net::{IpAddr, SocketAddr};

/// A connection dialled by hand to an agent's HTTP port, plain TCP or TLS alike (the
/// `alloc exec` websockets of the CLI and of a server relaying one).
pub trait HttpIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> HttpIo for T {}

/// The RPC port a peer address without one gets.
pub const DEFAULT_RPC_PORT: u16 = 4647;

/// Parse a peer address `host[:port]`, defaulting the port to 4647. The host may be a name;
/// it is resolved when dialled.
pub fn parse_peer_addr(s: &str) -> Result<(String, u16), String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("an address must not be empty".into());
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip.to_string(), DEFAULT_RPC_PORT));
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{s:?}: port {port:?} is not a number from 1 to 65535"))?;
            if host.is_empty() || port == 0 {
                return Err(format!("{s:?} is not host:port"));
            }
            Ok((host.to_string(), port))
        }
        None => Ok((s.to_string(), DEFAULT_RPC_PORT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_addresses_default_the_port() {
        assert_eq!(
            parse_peer_addr("10.0.0.1").unwrap(),
            ("10.0.0.1".into(), 4647)
        );
        assert_eq!(
            parse_peer_addr("server1:5647").unwrap(),
            ("server1".into(), 5647)
        );
        assert_eq!(
            parse_peer_addr("server1").unwrap(),
            ("server1".into(), 4647)
        );
        assert!(parse_peer_addr("server1:0").is_err());
        assert!(parse_peer_addr("").is_err());
    }
}
