//! Cuts a script's output stream into lines for the logs while holding at most
//! [`MAX_LINE_BYTES`] of it: a line longer than that is passed on in pieces of that size, so a
//! script that prints megabytes without a newline costs no more memory than one that prints
//! short lines.

/// The most bytes of an unfinished line held in memory.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Splits output into lines, bounded by [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// An empty splitter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next bytes of the stream and calls `emit(piece, ends_line)` for every complete
    /// line (without its newline, `ends_line` true) and for every [`MAX_LINE_BYTES`] piece of a
    /// line that is longer (`ends_line` false). What remains is kept for the next call.
    pub fn push(&mut self, data: &[u8], emit: &mut impl FnMut(&[u8], bool)) {
        let mut rest = data;
        while let Some(newline) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(newline);
            self.append(line, emit);
            emit(&self.pending, true);
            self.pending.clear();
            rest = after.get(1..).unwrap_or_default();
        }
        self.append(rest, emit);
    }

    /// Ends the stream: emits what remains of an unfinished last line, if anything.
    pub fn finish(&mut self, emit: &mut impl FnMut(&[u8], bool)) {
        if !self.pending.is_empty() {
            emit(&self.pending, false);
            self.pending.clear();
        }
    }

    /// Bytes held now (never more than [`MAX_LINE_BYTES`]).
    pub fn buffered(&self) -> usize {
        self.pending.len()
    }

    fn append(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(&[u8], bool)) {
        while self.pending.len().saturating_add(bytes.len()) > MAX_LINE_BYTES {
            let room = MAX_LINE_BYTES.saturating_sub(self.pending.len());
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            emit(&self.pending, false);
            self.pending.clear();
            bytes = later;
        }
        self.pending.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(chunks: &[Vec<u8>]) -> (Vec<(Vec<u8>, bool)>, usize) {
        let mut lines = Lines::new();
        let mut pieces = Vec::new();
        let mut most = 0;
        for chunk in chunks {
            lines.push(chunk, &mut |piece, ends| {
                pieces.push((piece.to_vec(), ends))
            });
            most = most.max(lines.buffered());
        }
        lines.finish(&mut |piece, ends| pieces.push((piece.to_vec(), ends)));
        (pieces, most)
    }

    #[test]
    fn lines_come_out_whole_and_a_long_line_in_pieces() {
        let (pieces, _) = split(&[b"one\ntw".to_vec(), b"o\nthree".to_vec()]);
        assert_eq!(
            pieces,
            vec![
                (b"one".to_vec(), true),
                (b"two".to_vec(), true),
                (b"three".to_vec(), false)
            ]
        );
        let long = vec![b'x'; 3 * MAX_LINE_BYTES + 5];
        let (pieces, most) = split(&[long]);
        assert_eq!(pieces.len(), 4);
        assert!(pieces.iter().all(|(p, _)| p.len() <= MAX_LINE_BYTES));
        assert!(most <= MAX_LINE_BYTES);
    }

    fn stream() -> impl Strategy<Value = Vec<Vec<u8>>> {
        // Mostly short lines, sometimes a very long one, cut at random places.
        let byte = prop_oneof![8 => Just(b'a'), 1 => Just(b'\n'), 1 => any::<u8>()];
        let run = prop_oneof![
            9 => proptest::collection::vec(byte, 0..200),
            1 => (0..3 * MAX_LINE_BYTES).prop_map(|n| vec![b'y'; n]),
        ];
        proptest::collection::vec(run, 0..12)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the output and however it is cut into chunks, nothing is lost or reordered
        /// (the pieces, with a newline after each ended line, are the stream) and no more than
        /// MAX_LINE_BYTES are ever held.
        #[test]
        fn streaming_is_lossless_and_bounded(chunks in stream()) {
            let (pieces, most) = split(&chunks);
            let mut rebuilt = Vec::new();
            for (piece, ends) in &pieces {
                prop_assert!(piece.len() <= MAX_LINE_BYTES);
                rebuilt.extend_from_slice(piece);
                if *ends {
                    rebuilt.push(b'\n');
                }
            }
            prop_assert_eq!(rebuilt, chunks.concat());
            prop_assert!(most <= MAX_LINE_BYTES);
        }
    }
}
