//! A check of an ISO base media file's box tree before the `mp4` crate reads it. That crate
//! walks each container's children by their declared sizes and seeks back when a child
//! declares fewer bytes than its own header (size 0 to 7 inside a container): it then reads the
//! same header forever (found by `fuzz/`'s media target). Every container it walks is walked
//! here first, in time linear in the file, and a child too small for its header or larger
//! than its parent is refused. So is a track run (`trun`) that claims more samples than the
//! file has bytes: one whose samples carry no fields of their own is read by a loop of that
//! many turns that reads nothing (4 billion at most).

/// Containers whose children the `mp4` crate reads in a loop, and where in their payload the
/// children start.
fn children_at(kind: &[u8; 4], payload: &[u8]) -> Option<usize> {
    match kind {
        b"moov" | b"trak" | b"mdia" | b"minf" | b"dinf" | b"stbl" | b"edts" | b"mvex" | b"moof"
        | b"traf" | b"udta" | b"ilst" => Some(0),
        // A full box (version and flags) with an entry count.
        b"stsd" => Some(8),
        // A full box, except QuickTime's, whose first child follows at once.
        b"meta" => Some(if payload.get(4..8) == Some(b"hdlr") {
            0
        } else {
            4
        }),
        _ => None,
    }
}

/// Deeper than any real file nests its boxes.
const DEPTH: usize = 16;

/// Whether every box the `mp4` crate would walk fits its parent and its own header.
pub(crate) fn sound(bytes: &[u8]) -> Result<(), &'static str> {
    walk(bytes, 0, bytes.len() as u64)
}

/// The boxes of `rest`, `depth` boxes down (0: the file's top level).
fn walk(mut rest: &[u8], depth: usize, file: u64) -> Result<(), &'static str> {
    if depth > DEPTH {
        return Err("its boxes nest too deep");
    }
    let inside = depth > 0;
    while !rest.is_empty() {
        let Some((head, _)) = rest.split_first_chunk::<8>() else {
            // A few trailing bytes: at the top level the reader fails on them; inside a box
            // it would read a header running on into the next box.
            if inside {
                return Err("a box's last bytes are too few for a box");
            }
            return Ok(());
        };
        let declared = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as u64;
        let kind: [u8; 4] = [head[4], head[5], head[6], head[7]];
        let (size, header) = match declared {
            // The top level's last box runs to the end (the reader stops there).
            0 if !inside => return Ok(()),
            1 => {
                let large = rest
                    .get(8..16)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes)
                    .ok_or("a box's large size is cut off")?;
                (large, 16)
            }
            n => (n, 8),
        };
        if size < header as u64 {
            return Err("a box is smaller than its own header");
        }
        let Ok(size) = usize::try_from(size) else {
            return Err("a box is larger than the file");
        };
        if size > rest.len() && inside {
            return Err("a box is larger than the box that holds it");
        }
        // The top level's last box may be cut: the reader walks what there is of it, so
        // that is checked too.
        let size = size.min(rest.len());
        let payload = rest.get(header..size).unwrap_or_default();
        if let Some(at) = children_at(&kind, payload) {
            walk(payload.get(at..).unwrap_or_default(), depth + 1, file)?;
        }
        // A track run: version and flags, then its sample count.
        if &kind == b"trun" {
            let count = payload
                .get(4..8)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            if count.is_some_and(|n| u64::from(n) > file) {
                return Err("a track run claims more samples than the file has bytes");
            }
        }
        rest = &rest[size..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut b = ((payload.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn a_child_smaller_than_its_header_is_refused_at_any_depth() {
        let fine = boxed(b"moov", &boxed(b"trak", &boxed(b"tkhd", &[0; 4])));
        assert_eq!(sound(&fine), Ok(()));
        for size in 0u32..8 {
            let mut child = size.to_be_bytes().to_vec();
            child.extend_from_slice(b"free");
            let bad = boxed(
                b"moov",
                &boxed(
                    b"trak",
                    &boxed(b"mdia", &boxed(b"minf", &boxed(b"dinf", &child))),
                ),
            );
            assert!(sound(&bad).is_err(), "size {size}");
        }
        // At the top level a size of 0 runs to the end, as the format says.
        let mut last = vec![0, 0, 0, 0];
        last.extend_from_slice(b"mdat");
        assert_eq!(sound(&last), Ok(()));
        // A cut file's last box is still walked as far as it goes.
        let mut cut = boxed(
            b"moov",
            &boxed(b"trak", &[0, 0, 0, 0, b'f', b'r', b'e', b'e']),
        );
        cut[3] += 100;
        assert!(sound(&cut).is_err());
        // A child larger than its parent.
        let mut over = boxed(b"moov", &[0, 0, 0, 64, b'f', b'r', b'e', b'e']);
        over.extend_from_slice(&[0; 8]);
        assert!(sound(&over).is_err());
    }
}
