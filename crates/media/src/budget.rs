//! A reader with a budget of calls, for the container crates. Their parsers are loops over
//! reads and seeks; a damaged file can make one of them go round forever (the fuzzer found a
//! Matroska file that seeks back to the same CRC-32 element at every turn). Every read and
//! seek spends one call; past the budget, each fails, and the crate reports the file as
//! unreadable. Reading a whole real file takes far fewer calls than it has bytes.

use std::io::{self, Cursor, Read, Seek, SeekFrom};

/// Calls allowed beyond one per byte of the file.
const SLACK: u64 = 100_000;

pub(crate) struct Budgeted<'a> {
    inner: Cursor<&'a [u8]>,
    left: u64,
}

impl<'a> Budgeted<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Budgeted {
            inner: Cursor::new(bytes),
            left: bytes.len() as u64 + SLACK,
        }
    }

    fn spend(&mut self) -> io::Result<()> {
        self.left = self.left.checked_sub(1).ok_or_else(|| {
            io::Error::other("its reader went round more often than the file has bytes")
        })?;
        Ok(())
    }
}

impl Read for Budgeted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.spend()?;
        self.inner.read(buf)
    }
}

impl Seek for Budgeted<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.spend()?;
        self.inner.seek(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_that_goes_round_runs_out() {
        let bytes = [0u8; 16];
        let mut r = Budgeted::new(&bytes);
        let mut turns = 0u64;
        let mut one = [0u8; 1];
        let stopped = loop {
            if let Err(e) = r
                .seek(SeekFrom::Start(0))
                .and_then(|_| r.read_exact(&mut one))
            {
                break e;
            }
            turns += 1;
        };
        assert!(stopped.to_string().contains("went round"), "{stopped}");
        assert!(turns <= 16 + SLACK, "{turns}");
    }
}
