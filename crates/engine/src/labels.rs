//! Option labels and their token paths.
//!
//! Each option gets a short code (`A`..`Z`; beyond 26 options, a letter and a digit, `A0`..`Z9`,
//! all of one length so no code is a prefix of another). A code that is several tokens is read
//! along its token path: the first token's logits at the question's answer position, each next
//! token's logits one step further, sharing everything before. The codes of one question form
//! a trie; each trie node with several edges is one read.

use crate::backend::{Node, Read, Token};
use protocol::confidence::softmax;

/// Code of option `i` of `n`.
pub fn option_code(i: usize, n: usize) -> String {
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    if n <= 26 {
        (letters[i] as char).to_string()
    } else {
        format!("{}{}", letters[i / 10] as char, i % 10)
    }
}

/// One edge of a label trie.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub token: Token,
    /// The label this edge completes.
    pub label: Option<usize>,
    pub child: Option<Trie>,
}

/// The token paths of a question's labels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trie {
    pub edges: Vec<Edge>,
}

/// Why labels cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabelError {
    #[error("label {0} has no tokens")]
    Empty(usize),
    #[error("label {0}'s tokens are a prefix of another label's")]
    Prefix(usize),
    #[error("labels {0} and {1} have the same tokens")]
    Duplicate(usize, usize),
}

impl Trie {
    /// Build from each label's token path.
    pub fn build(paths: &[Vec<Token>]) -> Result<Trie, LabelError> {
        let labelled: Vec<(&[Token], usize)> = paths
            .iter()
            .enumerate()
            .map(|(l, p)| (p.as_slice(), l))
            .collect();
        Trie::build_spellings(&labelled)
    }

    /// Build from token paths that may spell one label several ways (`Yes`, `yes`): a label's
    /// probability is the sum over its spellings. A path given twice for one label counts once.
    pub fn build_spellings(paths: &[(&[Token], usize)]) -> Result<Trie, LabelError> {
        let mut root = Trie::default();
        for (i, &(path, label)) in paths.iter().enumerate() {
            if path.is_empty() {
                return Err(LabelError::Empty(label));
            }
            if paths[..i].iter().any(|&(p, l)| p == path && l == label) {
                continue;
            }
            root.insert(path, label)?;
        }
        root.prune();
        Ok(root)
    }

    /// A subtree that holds one label is decided at its edge: the steps below it would read a
    /// softmax over one candidate, exactly 1, so they are not evaluated at all. (Option names
    /// whose first tokens differ are then read in one step, however many tokens they have.)
    fn prune(&mut self) {
        for e in &mut self.edges {
            if let Some(c) = &mut e.child {
                match c.only_label() {
                    Some(l) => {
                        e.label = Some(l);
                        e.child = None;
                    }
                    None => c.prune(),
                }
            }
        }
    }

    /// The label of a subtree that holds exactly one.
    fn only_label(&self) -> Option<usize> {
        match self.edges.as_slice() {
            [e] => match (&e.label, &e.child) {
                (Some(l), None) => Some(*l),
                (None, Some(c)) => c.only_label(),
                _ => None,
            },
            _ => None,
        }
    }

    fn insert(&mut self, path: &[Token], label: usize) -> Result<(), LabelError> {
        let (first, rest) = (path[0], &path[1..]);
        let idx = match self.edges.iter().position(|e| e.token == first) {
            Some(i) => i,
            None => {
                self.edges.push(Edge {
                    token: first,
                    label: None,
                    child: None,
                });
                self.edges.len() - 1
            }
        };
        let edge = &mut self.edges[idx];
        if rest.is_empty() {
            if let Some(other) = edge.label {
                return Err(LabelError::Duplicate(other, label));
            }
            if edge.child.is_some() {
                return Err(LabelError::Prefix(label));
            }
            edge.label = Some(label);
            Ok(())
        } else {
            if edge.label.is_some() {
                return Err(LabelError::Prefix(edge.label.unwrap_or(label)));
            }
            edge.child
                .get_or_insert_with(Trie::default)
                .insert(rest, label)
        }
    }

    /// The evaluation node for a question whose block is `tokens`: read this trie's first
    /// edges at the last token, and one more step for each edge that continues.
    pub fn node(&self, tokens: Vec<Token>) -> Node {
        let at = tokens.len().saturating_sub(1);
        Node {
            reads: vec![Read {
                at,
                candidates: self.edges.iter().map(|e| e.token).collect(),
            }],
            children: self
                .edges
                .iter()
                .filter_map(|e| e.child.as_ref().map(|c| c.node(vec![e.token])))
                .collect(),
            tokens,
            grow: None,
        }
    }

    /// Number of reads this trie takes (the logits entries it consumes).
    pub fn reads(&self) -> usize {
        1 + self
            .edges
            .iter()
            .filter_map(|e| e.child.as_ref())
            .map(Trie::reads)
            .sum::<usize>()
    }

    /// Label probabilities from the reads, consumed in the order [`Trie::node`] produces them.
    pub fn probabilities<'a>(
        &self,
        reads: &mut impl Iterator<Item = &'a Vec<f32>>,
        n_labels: usize,
        temperature: f64,
    ) -> Option<Vec<f64>> {
        let mut out = vec![0.0; n_labels];
        self.walk(reads, 1.0, temperature, &mut out)?;
        Some(out)
    }

    fn walk<'a>(
        &self,
        reads: &mut impl Iterator<Item = &'a Vec<f32>>,
        mass: f64,
        temperature: f64,
        out: &mut [f64],
    ) -> Option<()> {
        // A question's first read may carry more candidates after the labels' (a decision
        // adapter's features); the labels come first.
        let logits = reads.next()?.get(..self.edges.len())?;
        let p = softmax(logits, temperature);
        for (e, pe) in self.edges.iter().zip(&p) {
            if let Some(l) = e.label {
                *out.get_mut(l)? += mass * pe;
            }
        }
        for (e, pe) in self.edges.iter().zip(&p) {
            if let Some(c) = &e.child {
                c.walk(reads, mass * pe, temperature, out)?;
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_of_one_length() {
        let codes: Vec<String> = (0..255).map(|i| option_code(i, 255)).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 255);
        assert!(codes.iter().all(|c| c.len() == 2));
        assert_eq!(option_code(0, 3), "A");
        assert_eq!(option_code(25, 26), "Z");
    }

    #[test]
    fn trie_reads_multi_token_paths_and_sums_to_one() {
        // labels: [1,10], [1,11], [2] ; first read over {1,2}, second over {10,11}
        let trie = Trie::build(&[vec![1, 10], vec![1, 11], vec![2]]).unwrap();
        assert_eq!(trie.reads(), 2);
        let node = trie.node(vec![7, 8, 9]);
        assert_eq!(node.reads[0].at, 2);
        assert_eq!(node.reads[0].candidates, vec![1, 2]);
        assert_eq!(node.children.len(), 1);
        assert_eq!(node.children[0].tokens, vec![1]);
        assert_eq!(node.children[0].reads[0].candidates, vec![10, 11]);
        let reads = [vec![0.0f32, 0.0], vec![0.0f32, 0.0]];
        let p = trie.probabilities(&mut reads.iter(), 3, 1.0).unwrap();
        assert!(
            (p[0] - 0.25).abs() < 1e-12
                && (p[1] - 0.25).abs() < 1e-12
                && (p[2] - 0.5).abs() < 1e-12
        );
    }

    #[test]
    fn a_path_no_other_label_shares_is_read_at_its_first_token() {
        // [1,10,12] and [2,20] part at their first token: one read decides both; [3,30] and
        // [3,31] share theirs and need a second.
        let trie = Trie::build(&[vec![1, 10, 12], vec![2, 20]]).unwrap();
        assert_eq!(trie.reads(), 1);
        assert!(trie.node(vec![7]).children.is_empty());
        let reads = [vec![0.0f32, 0.0]];
        let p = trie.probabilities(&mut reads.iter(), 2, 1.0).unwrap();
        assert_eq!(p, vec![0.5, 0.5]);
        let trie = Trie::build(&[vec![3, 30, 5], vec![3, 31], vec![4, 40]]).unwrap();
        assert_eq!(trie.reads(), 2);
        let node = trie.node(vec![7]);
        assert_eq!(node.children.len(), 1);
        assert_eq!(node.children[0].tokens, vec![3]);
        assert!(node.children[0].children.is_empty());
    }

    #[test]
    fn prefix_and_duplicate_labels_are_refused() {
        assert_eq!(
            Trie::build(&[vec![1], vec![1, 2]]),
            Err(LabelError::Prefix(0))
        );
        assert_eq!(
            Trie::build(&[vec![1, 2], vec![1]]),
            Err(LabelError::Prefix(1))
        );
        assert_eq!(
            Trie::build(&[vec![3], vec![3]]),
            Err(LabelError::Duplicate(0, 1))
        );
        assert_eq!(Trie::build(&[vec![]]), Err(LabelError::Empty(0)));
    }

    #[test]
    fn spellings_of_one_label_add_up() {
        // label 0 spelled [1] or [2], label 1 spelled [3]; [1] given twice counts once
        let trie = Trie::build_spellings(&[(&[1], 0), (&[2], 0), (&[1], 0), (&[3], 1)]).unwrap();
        assert_eq!(trie.node(vec![9]).reads[0].candidates, vec![1, 2, 3]);
        let reads = [vec![0.0f32, 0.0, 0.0]];
        let p = trie.probabilities(&mut reads.iter(), 2, 1.0).unwrap();
        assert!((p[0] - 2.0 / 3.0).abs() < 1e-12 && (p[1] - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            Trie::build_spellings(&[(&[1], 0), (&[1], 1)]),
            Err(LabelError::Duplicate(0, 1))
        );
    }

    #[test]
    fn short_reads_are_detected() {
        let trie = Trie::build(&[vec![1, 10], vec![1, 11], vec![2]]).unwrap();
        let reads = [vec![0.0f32, 0.0]];
        assert!(trie.probabilities(&mut reads.iter(), 3, 1.0).is_none());
    }
}
