//! The one UUID generator: version 4 UUIDs in Nomad's lowercase `8-4-4-4-12` form, drawn from
//! a caller's RNG (an [`RngSource`](super::RngSource) fork in production, a seeded one in
//! tests), so IDs are reproducible wherever the randomness is.

use rand::RngCore;

/// A random (version 4) UUID in its lowercase `8-4-4-4-12` text form, as Nomad's IDs are.
pub fn new_uuid<R: RngCore + ?Sized>(rng: &mut R) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(HEX[(byte >> 4) as usize] as char);
        out.push(HEX[(byte & 0x0f) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn uuids_are_version_4_and_seedable() {
        let mut a = rand::rngs::StdRng::seed_from_u64(7);
        let mut b = rand::rngs::StdRng::seed_from_u64(7);
        let x = new_uuid(&mut a);
        assert_eq!(x, new_uuid(&mut b));
        assert_eq!(x.len(), 36);
        assert_eq!(&x[14..15], "4");
        assert!(matches!(&x[19..20], "8" | "9" | "a" | "b"), "{x}");
        for (i, c) in x.chars().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                assert_eq!(c, '-', "{x}");
            } else {
                assert!(c.is_ascii_hexdigit() && !c.is_ascii_uppercase(), "{x}");
            }
        }
        assert_ne!(x, new_uuid(&mut a));
    }
}
