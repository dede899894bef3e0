//! IP network arithmetic on CIDR prefixes, IPv4 and IPv6: `cidrhost(prefix, hostnum)`,
//! `cidrnetmask(prefix)`, `cidrsubnet(prefix, newbits, netnum)` and
//! `cidrsubnets(prefix, newbits...)`, with the meanings of HCL's standard library.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hcl::eval::FuncArgs;
use hcl::Value;

use super::{n, s, Out};

/// A prefix: its address as a number, the address width (32 or 128) and the prefix length.
#[derive(Debug, Clone, Copy)]
struct Prefix {
    addr: u128,
    width: u32,
    len: u32,
}

impl Prefix {
    fn parse(text: &str) -> Result<Prefix, String> {
        let (ip, len) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR prefix such as \"10.0.0.0/8\""))?;
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| format!("{text:?}: {ip:?} is not an IP address"))?;
        let (addr, width) = match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        };
        let len: u32 = len
            .parse()
            .ok()
            .filter(|l| *l <= width)
            .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {width}"))?;
        Ok(Prefix { addr, width, len })
    }

    /// The mask of a prefix length, in the width of this family.
    fn mask(&self, len: u32) -> u128 {
        let all = if self.width == 128 {
            u128::MAX
        } else {
            (1u128 << self.width) - 1
        };
        if len == 0 {
            0
        } else {
            all & !((1u128 << (self.width - len)) - 1)
        }
    }

    /// The first address of the network of `len` holding `addr`.
    fn network(&self, addr: u128, len: u32) -> u128 {
        addr & self.mask(len)
    }

    /// The last address of the network of `len` holding `addr`.
    fn last(&self, addr: u128, len: u32) -> u128 {
        self.network(addr, len) | (!self.mask(len) & self.mask(self.width))
    }

    fn ip(&self, addr: u128) -> String {
        if self.width == 32 {
            Ipv4Addr::from(addr as u32).to_string()
        } else {
            Ipv6Addr::from(addr).to_string()
        }
    }
}

/// A number argument that must be a whole number.
fn whole(v: &Value, what: &str) -> Result<i128, String> {
    let f = n(v);
    if f.fract() != 0.0 {
        return Err(format!("{what} must be a whole number, not {f}"));
    }
    Ok(f as i128)
}

pub(super) fn cidrhost(a: FuncArgs) -> Out {
    let p = Prefix::parse(s(&a[0]))?;
    let host = whole(&a[1], "cidrhost: the host number")?;
    let bits = p.width - p.len;
    let size: i128 = if bits >= 127 {
        i128::MAX
    } else {
        1i128 << bits
    };
    let offset = if host < 0 { size + host } else { host };
    if offset < 0 || offset >= size {
        return Err(format!(
            "cidrhost: a prefix of {} bits cannot hold a host numbered {host}",
            p.len
        ));
    }
    Ok(p.ip(p.network(p.addr, p.len) + offset as u128).into())
}

pub(super) fn cidrnetmask(a: FuncArgs) -> Out {
    let p = Prefix::parse(s(&a[0]))?;
    if p.width != 32 {
        return Err("cidrnetmask: only IPv4 prefixes have a netmask".into());
    }
    Ok(p.ip(p.mask(p.len)).into())
}

/// The subnet `netnum` of `newbits` more bits.
fn subnet(p: &Prefix, newbits: i128, netnum: i128) -> Result<(u128, u32), String> {
    if newbits < 0 || p.len as i128 + newbits > p.width as i128 {
        return Err(format!(
            "cidrsubnet: {newbits} new bits on a /{} prefix go past {} bits",
            p.len, p.width
        ));
    }
    let len = p.len + newbits as u32;
    if netnum < 0 || (newbits < 127 && netnum >= (1i128 << newbits)) {
        return Err(format!(
            "cidrsubnet: {newbits} new bits cannot number a subnet {netnum}"
        ));
    }
    let shift = p.width - len;
    let offset = if shift >= 128 {
        0
    } else {
        (netnum as u128) << shift
    };
    Ok((p.network(p.addr, p.len) | offset, len))
}

pub(super) fn cidrsubnet(a: FuncArgs) -> Out {
    let p = Prefix::parse(s(&a[0]))?;
    let (addr, len) = subnet(
        &p,
        whole(&a[1], "cidrsubnet: newbits")?,
        whole(&a[2], "cidrsubnet: netnum")?,
    )?;
    Ok(format!("{}/{len}", p.ip(addr)).into())
}

/// Consecutive subnets of the given sizes, each at the first free place aligned to its size.
pub(super) fn cidrsubnets(a: FuncArgs) -> Out {
    let p = Prefix::parse(s(&a[0]))?;
    let base = p.network(p.addr, p.len);
    let end = p.last(p.addr, p.len);
    let mut next = base;
    let mut out = Vec::new();
    for v in a.variadic_args() {
        let newbits = whole(v, "cidrsubnets: newbits")?;
        if newbits < 1 || p.len as i128 + newbits > p.width as i128 {
            return Err(format!(
                "cidrsubnets: {newbits} new bits on a /{} prefix are out of range",
                p.len
            ));
        }
        let len = p.len + newbits as u32;
        // Align up to the subnet's size.
        let mut start = p.network(next, len);
        if start < next {
            start = p
                .last(next, len)
                .checked_add(1)
                .ok_or("cidrsubnets: no room")?;
        }
        let last = p.last(start, len);
        if start < base || last > end || start > end {
            return Err(format!(
                "cidrsubnets: not enough room in {} for the subnets asked for",
                s(&a[0])
            ));
        }
        out.push(Value::from(format!("{}/{len}", p.ip(start))));
        next = match last.checked_add(1) {
            Some(n) => n,
            None => end.wrapping_add(1),
        };
    }
    Ok(Value::Array(out))
}
