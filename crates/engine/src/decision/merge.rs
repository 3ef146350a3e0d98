//! Identical branches of one forward are evaluated once. Two questions that render to the same
//! tokens under the same parent (the same question asked with and without its adapter, or
//! under two ids, or the same set label twice) would be two sequences with the same cells and
//! the same logits; here they become one node whose reads carry the union of the candidates
//! each read, and each asked read gets its own candidates' logits back from it.
//!
//! Answers keep their bits: the merged node holds the same tokens at the same positions and is
//! evaluated in a micro-batch of its own like any node, and reading more candidates at a
//! position does not move the logits of the others. A growing node (a span branch) is never
//! merged: its steps depend on its own steer.

use std::collections::HashMap;

use crate::backend::{Node, Read, RootLogits, Token};

/// Where each read of the trees as asked comes from in the merged trees' logits.
#[derive(Debug)]
pub(super) struct Merged {
    roots: Vec<RootMap>,
    /// Tokens of the asked trees the merged ones do not evaluate.
    pub(super) saved_tokens: usize,
}

#[derive(Debug)]
struct RootMap {
    /// Fixed reads of the merged root; what follows them (growth steps) passes through.
    merged_reads: usize,
    /// Per asked read, in depth-first order: the merged read and its candidates' places there.
    asked: Vec<(usize, Vec<usize>)>,
}

/// The trees with duplicate sibling branches merged, and how to give each asked read its
/// logits back; `None` (the trees unchanged) when no branch is asked twice.
pub(super) fn merge(roots: Vec<Node>) -> (Vec<Node>, Option<Merged>) {
    if !roots.iter().any(has_duplicates) {
        return (roots, None);
    }
    let mut merged = Vec::with_capacity(roots.len());
    let mut maps = Vec::with_capacity(roots.len());
    for root in &roots {
        let mut b = Builder::default();
        let node = b.group(&[root]);
        let mut asked = Vec::new();
        collect(root, &b.of, &mut asked);
        maps.push(RootMap {
            merged_reads: b.reads,
            asked,
        });
        merged.push(node);
    }
    let asked: usize = roots.iter().map(Node::total_tokens).sum();
    let kept: usize = merged.iter().map(Node::total_tokens).sum();
    let saved_tokens = asked.saturating_sub(kept);
    (
        merged,
        Some(Merged {
            roots: maps,
            saved_tokens,
        }),
    )
}

impl Merged {
    /// The logits of the merged trees, given back per asked read (a candidate the merged read
    /// lacks, which cannot happen, reads as impossible).
    pub(super) fn expand(&self, logits: Vec<RootLogits>) -> Vec<RootLogits> {
        logits
            .into_iter()
            .zip(&self.roots)
            .map(|(got, map)| {
                let mut out: RootLogits = map
                    .asked
                    .iter()
                    .map(|(from, places)| {
                        let read = got.get(*from);
                        places
                            .iter()
                            .map(|&p| {
                                read.and_then(|r| r.get(p))
                                    .copied()
                                    .unwrap_or(f32::NEG_INFINITY)
                            })
                            .collect()
                    })
                    .collect();
                out.extend(got.into_iter().skip(map.merged_reads));
                out
            })
            .collect()
    }
}

/// Two branches that are one sequence: the same tokens, reads at the same places, children of
/// the same shape, and neither growing.
fn same_shape(a: &Node, b: &Node) -> bool {
    a.grow.is_none()
        && b.grow.is_none()
        && a.tokens == b.tokens
        && a.reads.len() == b.reads.len()
        && a.reads.iter().zip(&b.reads).all(|(x, y)| x.at == y.at)
        && a.children.len() == b.children.len()
        && a.children
            .iter()
            .zip(&b.children)
            .all(|(x, y)| same_shape(x, y))
}

/// Group `nodes` into runs of the same shape, in order of first appearance.
fn groups<'n>(nodes: impl IntoIterator<Item = Vec<&'n Node>>) -> Vec<Vec<&'n Node>> {
    let mut out: Vec<Vec<&'n Node>> = Vec::new();
    let mut by_tokens: HashMap<&'n [Token], Vec<usize>> = HashMap::new();
    for g in nodes {
        let lead = g[0];
        let seen = by_tokens.entry(&lead.tokens[..]).or_default();
        match seen.iter().find(|&&i| same_shape(out[i][0], lead)) {
            Some(&i) => out[i].extend(g),
            None => {
                seen.push(out.len());
                out.push(g);
            }
        }
    }
    out
}

fn has_duplicates(node: &Node) -> bool {
    groups(node.children.iter().map(|c| vec![c])).len() < node.children.len()
        || node.children.iter().any(has_duplicates)
}

#[derive(Default)]
struct Builder {
    /// Reads of the merged nodes built so far. Nodes are built in the order the backend
    /// returns their reads (a node's reads, then its children's), so this is the next node's
    /// first read.
    reads: usize,
    /// Each asked node: its merged node's first read, and per read its candidates' places
    /// there.
    of: HashMap<*const Node, (usize, Vec<Vec<usize>>)>,
}

impl Builder {
    /// One merged node for branches of the same shape.
    fn group(&mut self, members: &[&Node]) -> Node {
        let lead = members[0];
        let base = self.reads;
        self.reads += lead.reads.len();
        let mut reads = Vec::with_capacity(lead.reads.len());
        let mut places: Vec<Vec<Vec<usize>>> = vec![Vec::new(); members.len()];
        for (i, r) in lead.reads.iter().enumerate() {
            let mut candidates: Vec<Token> = Vec::new();
            let mut index: HashMap<Token, usize> = HashMap::new();
            for (m, member) in members.iter().enumerate() {
                let own = member.reads[i]
                    .candidates
                    .iter()
                    .map(|&c| {
                        *index.entry(c).or_insert_with(|| {
                            candidates.push(c);
                            candidates.len() - 1
                        })
                    })
                    .collect();
                places[m].push(own);
            }
            reads.push(Read {
                at: r.at,
                candidates,
            });
        }
        for (member, own) in members.iter().zip(places) {
            self.of.insert(*member as *const Node, (base, own));
        }
        let positional = (0..lead.children.len())
            .map(|k| members.iter().map(|m| &m.children[k]).collect::<Vec<_>>());
        let children = groups(positional).iter().map(|g| self.group(g)).collect();
        Node {
            tokens: lead.tokens.clone(),
            reads,
            children,
            grow: lead.grow.clone(),
        }
    }
}

/// Each asked read, in the asked tree's depth-first order: where it comes from.
fn collect(
    node: &Node,
    of: &HashMap<*const Node, (usize, Vec<Vec<usize>>)>,
    out: &mut Vec<(usize, Vec<usize>)>,
) {
    if let Some((base, places)) = of.get(&(node as *const Node)) {
        for (i, p) in places.iter().enumerate() {
            out.push((base + i, p.clone()));
        }
    }
    for c in &node.children {
        collect(c, of, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(tokens: &[Token], candidates: &[Token]) -> Node {
        Node {
            tokens: tokens.to_vec(),
            reads: vec![Read {
                at: tokens.len() - 1,
                candidates: candidates.to_vec(),
            }],
            ..Node::default()
        }
    }

    /// A stand-in forward: each read's logit for candidate `c` is a function of the path to
    /// the node and `c`, as a real forward's is of the sequence.
    fn forward(roots: &[Node]) -> Vec<RootLogits> {
        fn walk(node: &Node, path: &[Token], out: &mut RootLogits) {
            let mut path = path.to_vec();
            path.extend(&node.tokens);
            let h: f32 = path.iter().map(|&t| t as f32).sum();
            for r in &node.reads {
                out.push(
                    r.candidates
                        .iter()
                        .map(|&c| h * 10.0 + c as f32 + r.at as f32 / 100.0)
                        .collect(),
                );
            }
            for c in &node.children {
                walk(c, &path, out);
            }
        }
        roots
            .iter()
            .map(|r| {
                let mut out = Vec::new();
                walk(r, &[], &mut out);
                out
            })
            .collect()
    }

    fn count(node: &Node) -> usize {
        1 + node.children.iter().map(count).sum::<usize>()
    }

    #[test]
    fn a_branch_asked_twice_is_one_node_and_each_gets_its_own_candidates() {
        let mut yes_no = leaf(&[5, 6, 7], &[1, 2]);
        let mut with_features = leaf(&[5, 6, 7], &[1, 2, 90, 91]);
        // A two-token label continues under each copy.
        yes_no.children.push(leaf(&[1], &[3, 4]));
        with_features.children.push(leaf(&[1], &[3, 4]));
        let other = leaf(&[5, 8], &[1, 2]);
        let root = Node {
            tokens: vec![100, 101],
            reads: Vec::new(),
            children: vec![yes_no, other, with_features, leaf(&[5, 8], &[2])],
            grow: None,
        };
        let asked = vec![root.clone(), leaf(&[7], &[1])];
        let (merged, map) = merge(asked.clone());
        let map = map.expect("duplicates found");
        // Root, one merged question with its label child, one merged other question.
        assert_eq!(count(&merged[0]), 4);
        assert_eq!(map.saved_tokens, 3 + 1 + 2);
        assert_eq!(merged[1], asked[1]);
        assert_eq!(map.expand(forward(&merged)), forward(&asked));
    }

    #[test]
    fn distinct_branches_and_reads_at_other_places_are_left_as_they_are() {
        let root = Node {
            tokens: vec![1],
            reads: Vec::new(),
            children: vec![leaf(&[2], &[1]), leaf(&[3], &[1])],
            grow: None,
        };
        let (same, map) = merge(vec![root.clone()]);
        assert!(map.is_none());
        assert_eq!(same, vec![root]);
        // Children of the same tokens whose reads sit at other places are left apart too.
        let mut a = leaf(&[2, 3], &[1]);
        a.reads[0].at = 0;
        let b = leaf(&[2, 3], &[1]);
        let root = Node {
            tokens: vec![1],
            children: vec![a, b],
            ..Node::default()
        };
        assert!(merge(vec![root]).1.is_none());
    }

    #[derive(Debug)]
    struct Stop;
    impl crate::backend::Steer for Stop {
        fn candidates(&self, _: &[Token]) -> Option<Vec<Token>> {
            None
        }
        fn max_tokens(&self) -> usize {
            1
        }
    }

    #[test]
    fn growing_branches_are_never_merged_and_their_steps_pass_through() {
        let grow = crate::backend::Grow(std::sync::Arc::new(Stop));
        let growing = Node {
            grow: Some(grow),
            ..leaf(&[4, 4], &[1])
        };
        let root = Node {
            tokens: vec![1],
            reads: Vec::new(),
            children: vec![
                growing.clone(),
                leaf(&[2], &[1]),
                growing,
                leaf(&[2], &[1, 3]),
            ],
            grow: None,
        };
        let (merged, map) = merge(vec![root.clone()]);
        let map = map.expect("the plain branches are merged");
        assert_eq!(count(&merged[0]), 4, "both growing branches stay");
        // The backend returns growth steps after a root's fixed reads.
        let step = vec![vec![7.5f32], vec![8.5]];
        let mut got = forward(&merged);
        got[0].extend(step.clone());
        let mut want = forward(&[root]);
        want[0].extend(step);
        assert_eq!(map.expand(got), want);
    }
}
