//! The prefix cache of a decision session: what an evaluated node left behind, kept across
//! forwards so that a later request whose tree starts the same way evaluates only what follows.
//!
//! An entry is keyed by the exact path from the session's system prompt to the node: every
//! node's tokens on the way, with the node boundaries (a node is evaluated in micro-batches of
//! its own, so the same tokens cut into other nodes could round differently). It keeps the
//! node's reads (positions and candidates, compared on a hit) with their logits and, for a
//! root (a request's state), the root's sequence cells as llama.cpp wrote them. A hit gives
//! back those bytes and numbers, so an answer is bit-identical whether or not the cache held
//! its prefix. Other interior nodes keep no cells (their cells would repeat the state's for
//! every question); a leaf needs none.
//!
//! A root whose whole path is not there may still start like a cached one (the same
//! conversation with one more message): the longest cached root sharing its first `k` whole
//! micro-batches of tokens lends its cells, cut back to those `k × block` tokens, and only the
//! rest is evaluated. llama.cpp cuts a node's tokens into micro-batches of `block` from its
//! first token, so the rest falls into the same micro-batches it would cold: the cells and
//! logits are the same bits.
//!
//! The cache is bounded in bytes (the cells' serialized size plus keys and logits) and evicts
//! the least recently used entry first. The session clears it whenever its prefix changes.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use engine::backend::{Read, Token};
use hashlink::LinkedHashMap;
use llama_cpp_2::context::session::SeqState;

/// Bytes an entry costs beyond its cells, keys and logits (map slot, vectors' headers).
const ENTRY_OVERHEAD: usize = 128;

/// A root's start found in the cache: cells to begin from, good for its first `cut` tokens.
pub(crate) struct Partial {
    pub cells: Arc<SeqState>,
    pub cut: usize,
}

/// What a hit gives back.
pub(crate) struct Hit {
    /// The logits of the node's reads, in its read order.
    pub logits: Vec<Vec<f32>>,
    /// The root's sequence cells (only for a root looked up with children to evaluate).
    pub cells: Option<Arc<SeqState>>,
}

struct Entry {
    reads: Vec<Read>,
    logits: Vec<Vec<f32>>,
    cells: Option<Arc<SeqState>>,
    bytes: usize,
    /// The hashes under which `starts` finds this root's whole micro-batches.
    starts: Vec<u64>,
}

/// A least-recently-used map from node paths to what their evaluation left.
pub(crate) struct PrefixCache {
    /// Least recently used first.
    map: LinkedHashMap<Vec<u32>, Entry>,
    bytes: usize,
    budget: usize,
    /// Tokens of one micro-batch: roots are matched by their start in whole ones.
    block: usize,
    /// A hash of a root's first `k × block` tokens → the key of the latest root that starts so.
    starts: HashMap<u64, Vec<u32>>,
}

impl PrefixCache {
    /// A cache of at most `budget` bytes (0: off), matching roots' starts in whole
    /// micro-batches of `block` tokens (0: whole roots only).
    pub fn new(budget: usize, block: usize) -> PrefixCache {
        PrefixCache {
            map: LinkedHashMap::new(),
            bytes: 0,
            budget,
            block,
            starts: HashMap::new(),
        }
    }

    /// Hashes of `tokens`' first `k × block` tokens, for k = 1 while tokens remain after them.
    fn start_hashes(&self, tokens: &[Token]) -> Vec<u64> {
        if self.block == 0 {
            return Vec::new();
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        tokens[..tokens.len().saturating_sub(1)]
            .chunks_exact(self.block)
            .map(|b| {
                b.hash(&mut h);
                h.finish()
            })
            .collect()
    }

    /// The longest start of root `tokens` a cached root shares in whole micro-batches (some
    /// tokens always remain to evaluate).
    pub fn lookup_start(&mut self, tokens: &[Token]) -> Option<Partial> {
        if !self.enabled() {
            return None;
        }
        let hashes = self.start_hashes(tokens);
        for (k, h) in hashes.iter().enumerate().rev() {
            let cut = (k + 1) * self.block;
            let Some(key) = self.starts.get(h) else {
                continue;
            };
            // The key of a root is its length, then its tokens: compare them, not the hash.
            if key.get(1..1 + cut) != Some(&tokens[..cut]) {
                continue;
            }
            let key = key.clone();
            if let Some(cells) = self.map.to_back(&key).and_then(|e| e.cells.clone()) {
                return Some(Partial { cells, cut });
            }
        }
        None
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Bytes the entries take now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.starts.clear();
        self.bytes = 0;
    }

    /// Forget an entry that left the map.
    fn dropped(&mut self, key: &[u32], old: Entry) {
        self.bytes -= old.bytes;
        for h in old.starts {
            if self.starts.get(&h).is_some_and(|k| k == key) {
                self.starts.remove(&h);
            }
        }
    }

    /// The key of a node: its parent's key (none for a root), then the node's length and
    /// tokens.
    pub fn key(parent: Option<&[u32]>, tokens: &[Token]) -> Vec<u32> {
        let parent = parent.unwrap_or(&[]);
        let mut key = Vec::with_capacity(parent.len() + 1 + tokens.len());
        key.extend_from_slice(parent);
        key.push(tokens.len() as u32);
        key.extend_from_slice(tokens);
        key
    }

    /// The entry for `key` if it answers `reads` and, where `cells` is asked, holds cells.
    pub fn lookup(&mut self, key: &[u32], reads: &[Read], cells: bool) -> Option<Hit> {
        if !self.enabled() {
            return None;
        }
        let entry = self.map.to_back(key)?;
        if entry.reads != reads || (cells && entry.cells.is_none()) {
            return None;
        }
        Some(Hit {
            logits: entry.logits.clone(),
            cells: if cells { entry.cells.clone() } else { None },
        })
    }

    /// Keep what evaluating the node at `key` left (`root`: its tokens, where it is a root
    /// whose start later roots may share); an entry already there is replaced only when the
    /// new one adds cells. Evicts the least recently used entries beyond the budget (the new
    /// one included, if it alone exceeds it).
    pub fn store(
        &mut self,
        key: Vec<u32>,
        root: Option<&[Token]>,
        reads: &[Read],
        logits: Vec<Vec<f32>>,
        cells: Option<Arc<SeqState>>,
    ) {
        if !self.enabled() {
            return;
        }
        if let Some(old) = self.map.to_back(&key) {
            if old.cells.is_some() || cells.is_none() {
                return;
            }
        }
        let starts = match (root, &cells) {
            (Some(tokens), Some(_)) => self.start_hashes(tokens),
            _ => Vec::new(),
        };
        // Each start maps to a copy of the key.
        let bytes = starts.len() * (key.len() * std::mem::size_of::<u32>() + ENTRY_OVERHEAD)
            + ENTRY_OVERHEAD
            + key.len() * std::mem::size_of::<u32>()
            + reads
                .iter()
                .map(|r| r.candidates.len() * std::mem::size_of::<Token>())
                .sum::<usize>()
            + logits
                .iter()
                .map(|l| l.len() * std::mem::size_of::<f32>())
                .sum::<usize>()
            + cells.as_ref().map_or(0, |c| c.byte_len());
        if bytes > self.budget {
            if let Some(old) = self.map.remove(&key) {
                self.dropped(&key, old);
            }
            return;
        }
        for h in &starts {
            self.starts.insert(*h, key.clone());
        }
        let entry = Entry {
            reads: reads.to_vec(),
            logits,
            cells,
            bytes,
            starts,
        };
        if let Some(mut old) = self.map.insert(key.clone(), entry) {
            // Its starts now point at the new entry, under the same key.
            old.starts.clear();
            self.dropped(&key, old);
        }
        self.bytes += bytes;
        while self.bytes > self.budget {
            match self.map.pop_front() {
                Some((k, old)) => self.dropped(&k, old),
                None => break,
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(at: usize) -> Read {
        Read {
            at,
            candidates: vec![1, 2],
        }
    }

    #[test]
    fn keys_keep_node_boundaries() {
        let ab_c = PrefixCache::key(Some(&PrefixCache::key(None, &[1, 2])), &[3]);
        let a_bc = PrefixCache::key(Some(&PrefixCache::key(None, &[1])), &[2, 3]);
        assert_ne!(
            ab_c, a_bc,
            "the same tokens cut into other nodes are another path"
        );
    }

    #[test]
    fn a_hit_needs_the_same_reads_and_cells_when_asked() {
        let mut c = PrefixCache::new(1 << 20, 0);
        let k = PrefixCache::key(None, &[5, 6, 7]);
        c.store(k.clone(), None, &[read(2)], vec![vec![0.5, -1.0]], None);
        let hit = c.lookup(&k, &[read(2)], false).expect("a hit");
        assert_eq!(hit.logits, vec![vec![0.5, -1.0]]);
        assert!(c.lookup(&k, &[read(1)], false).is_none(), "other reads");
        assert!(c.lookup(&k, &[read(2)], true).is_none(), "no cells kept");
        assert!(c
            .lookup(&PrefixCache::key(None, &[5, 6]), &[], false)
            .is_none());
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let one = ENTRY_OVERHEAD + 4 * 2 + 4 * 2 + 4 * 2;
        let mut c = PrefixCache::new(2 * one, 0);
        let (a, b, d) = (
            PrefixCache::key(None, &[1]),
            PrefixCache::key(None, &[2]),
            PrefixCache::key(None, &[3]),
        );
        c.store(a.clone(), None, &[read(0)], vec![vec![1.0, 2.0]], None);
        c.store(b.clone(), None, &[read(0)], vec![vec![1.0, 2.0]], None);
        assert!(c.lookup(&a, &[read(0)], false).is_some()); // a is now the most recent
        c.store(d.clone(), None, &[read(0)], vec![vec![1.0, 2.0]], None);
        assert_eq!(c.len(), 2);
        assert!(c.bytes() <= 2 * one);
        assert!(
            c.lookup(&b, &[read(0)], false).is_none(),
            "b was least recent"
        );
        assert!(c.lookup(&a, &[read(0)], false).is_some());
        assert!(c.lookup(&d, &[read(0)], false).is_some());
    }

    #[test]
    fn off_keeps_nothing() {
        let mut c = PrefixCache::new(0, 4);
        let k = PrefixCache::key(None, &[1]);
        c.store(k.clone(), None, &[], Vec::new(), None);
        assert!(c.lookup(&k, &[], false).is_none());
        assert_eq!(c.bytes(), 0);
    }
}
