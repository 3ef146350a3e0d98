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
//! The cache is bounded in bytes (the cells' serialized size plus keys and logits) and evicts
//! the least recently used entry first. The session clears it whenever its prefix changes.

use std::sync::Arc;

use engine::backend::{Read, Token};
use hashlink::LinkedHashMap;
use llama_cpp_2::context::session::SeqState;

/// Bytes an entry costs beyond its cells, keys and logits (map slot, vectors' headers).
const ENTRY_OVERHEAD: usize = 128;

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
}

/// A least-recently-used map from node paths to what their evaluation left.
pub(crate) struct PrefixCache {
    /// Least recently used first.
    map: LinkedHashMap<Vec<u32>, Entry>,
    bytes: usize,
    budget: usize,
}

impl PrefixCache {
    /// A cache of at most `budget` bytes (0: off).
    pub fn new(budget: usize) -> PrefixCache {
        PrefixCache {
            map: LinkedHashMap::new(),
            bytes: 0,
            budget,
        }
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
        self.bytes = 0;
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

    /// Keep what evaluating the node at `key` left; an entry already there is replaced only
    /// when the new one adds cells. Evicts the least recently used entries beyond the budget
    /// (the new one included, if it alone exceeds it).
    pub fn store(
        &mut self,
        key: Vec<u32>,
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
        let bytes = ENTRY_OVERHEAD
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
                self.bytes -= old.bytes;
            }
            return;
        }
        let entry = Entry {
            reads: reads.to_vec(),
            logits,
            cells,
            bytes,
        };
        if let Some(old) = self.map.insert(key, entry) {
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        while self.bytes > self.budget {
            match self.map.pop_front() {
                Some((_, old)) => self.bytes -= old.bytes,
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
        let mut c = PrefixCache::new(1 << 20);
        let k = PrefixCache::key(None, &[5, 6, 7]);
        c.store(k.clone(), &[read(2)], vec![vec![0.5, -1.0]], None);
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
        let mut c = PrefixCache::new(2 * one);
        let (a, b, d) = (
            PrefixCache::key(None, &[1]),
            PrefixCache::key(None, &[2]),
            PrefixCache::key(None, &[3]),
        );
        c.store(a.clone(), &[read(0)], vec![vec![1.0, 2.0]], None);
        c.store(b.clone(), &[read(0)], vec![vec![1.0, 2.0]], None);
        assert!(c.lookup(&a, &[read(0)], false).is_some()); // a is now the most recent
        c.store(d.clone(), &[read(0)], vec![vec![1.0, 2.0]], None);
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
        let mut c = PrefixCache::new(0);
        let k = PrefixCache::key(None, &[1]);
        c.store(k.clone(), &[], Vec::new(), None);
        assert!(c.lookup(&k, &[], false).is_none());
        assert_eq!(c.bytes(), 0);
    }
}
