//! Keys and proof of work: what a key looks like, how it is stored (a hash, never the key),
//! how a challenge is solved, and whose network address a request comes from.

use std::fmt;
use std::net::IpAddr;

use rand::distr::{Alphanumeric, SampleString};
use sha2::{Digest, Sha256};

/// What every key starts with.
pub const KEY_PREFIX: &str = "sk-vsr-";
/// Random characters after the prefix (base62: ~190 bits).
const KEY_RANDOM: usize = 32;
/// Characters of a key shown as its `prefix` (the prefix and four random characters).
const SHOWN: usize = KEY_PREFIX.len() + 4;

/// A key as a client holds it. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({}…)", self.shown())
    }
}

impl Secret {
    /// A new random key.
    pub fn generate() -> Secret {
        let mut rng = rand::rng();
        Secret(format!(
            "{KEY_PREFIX}{}",
            Alphanumeric.sample_string(&mut rng, KEY_RANDOM)
        ))
    }

    /// A key a client sent, if it has the shape of one.
    /// An older System Two key (`sk-pt-` and 16 to 64 letters, digits, `-` or `_`) is read
    /// too, so that it is looked up (and forgotten) like any other key.
    pub fn parse(s: &str) -> Option<Secret> {
        if let Some(rest) = s.strip_prefix(OLD_KEY_PREFIX) {
            return ((16..=64).contains(&rest.len())
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
            .then(|| Secret(s.to_string()));
        }
        let rest = s.strip_prefix(KEY_PREFIX)?;
        (rest.len() == KEY_RANDOM && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| Secret(s.to_string()))
    }

    /// The hash the store keeps: SHA-256 of the key, hex. Keys carry ~190 random bits, so
    /// a fast hash is enough: there is nothing to guess.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }

    /// The part of the key shown in lists (`sk-vsr-AbCd`, `sk-pt-AbCd`).
    pub fn shown(&self) -> &str {
        let n = if self.0.starts_with(OLD_KEY_PREFIX) {
            OLD_KEY_PREFIX.len() + SHOWN - KEY_PREFIX.len()
        } else {
            SHOWN
        };
        self.0.get(..n).unwrap_or(&self.0)
    }

    /// The key itself, to show once to the client that created it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// The prefix of the older System Two keys (recognised, never issued here).
pub const OLD_KEY_PREFIX: &str = "sk-pt-";

/// Whether a credential has the shape of a service key's prefix (this one's or the older
/// System Two one's), so that it must be checked rather than taken for no key.
pub fn has_key_prefix(s: &str) -> bool {
    s.starts_with(KEY_PREFIX) || s.starts_with(OLD_KEY_PREFIX)
}

/// A new public id: `<kind>_` and 24 random characters.
pub fn new_id(kind: &str) -> String {
    format!(
        "{kind}_{}",
        Alphanumeric.sample_string(&mut rand::rng(), 24)
    )
}

/// Leading zero bits of SHA-256(`challenge` + ":" + `nonce`).
pub fn work_bits(challenge: &str, nonce: &str) -> u32 {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b":");
    h.update(nonce.as_bytes());
    let d = h.finalize();
    let mut bits = 0;
    for b in d {
        if b == 0 {
            bits += 8;
        } else {
            bits += b.leading_zeros();
            break;
        }
    }
    bits
}

/// Whether `nonce` (a decimal string) solves `challenge` at `difficulty` bits.
pub fn solves(challenge: &str, nonce: &str, difficulty: u32) -> bool {
    !nonce.is_empty()
        && nonce.len() <= 20
        && nonce.bytes().all(|b| b.is_ascii_digit())
        && work_bits(challenge, nonce) >= difficulty
}

/// The network address a request counts against: an IPv4 address, or an IPv6 address's
/// /64 (an IPv4-mapped IPv6 address counts as its IPv4 address).
pub fn address_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_hide() {
        let k = Secret::generate();
        assert!(k.expose().starts_with(KEY_PREFIX));
        assert_eq!(Secret::parse(k.expose()), Some(k.clone()));
        assert_eq!(k.hash().len(), 64);
        assert_ne!(k.hash(), Secret::generate().hash());
        let dbg = format!("{k:?}");
        assert!(!dbg.contains(&k.expose()[SHOWN..]), "{dbg}");
        assert_eq!(Secret::parse("sk-vsr-short"), None);
        assert!(Secret::parse(&format!("sk-pt-{}", "a".repeat(32))).is_some());
        assert_eq!(
            Secret::parse(&format!("sk-pt-AbCd{}", "a".repeat(28)))
                .unwrap()
                .shown(),
            "sk-pt-AbCd"
        );
        assert_eq!(Secret::parse("sk-pt-short"), None);
        assert_eq!(Secret::parse(&format!("sk-pt-{}", "a!".repeat(16))), None);
    }

    #[test]
    fn proof_of_work_counts_leading_zero_bits() {
        // Found by brute force with Python's hashlib, as the spec's snippet does.
        let c = "test-challenge";
        let n = (0u64..)
            .find(|n| work_bits(c, &n.to_string()) >= 12)
            .unwrap()
            .to_string();
        assert!(solves(c, &n, 12));
        assert!(!solves(c, &n, 40));
        assert!(!solves(c, "", 0));
        assert!(!solves(c, "12a", 0));
        assert!(!solves(c, "-1", 0));
        // SHA-256("abc:0") = ... checked against hashlib: the first byte decides.
        let d = Sha256::digest(b"abc:0");
        assert_eq!(
            work_bits("abc", "0"),
            d[0].leading_zeros().min(8) + if d[0] == 0 { d[1].leading_zeros() } else { 0 }
        );
    }

    #[test]
    fn ipv6_counts_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        let m: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(address_key(m), "10.0.0.7");
    }
}
