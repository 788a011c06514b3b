//! Character-level text: the embedded Shakespeare corpus (`crates/train/data/shakespeare/`,
//! source and licence in its README) or a user's UTF-8 file, a character tokenizer (the sorted
//! distinct characters), nanoGPT's 90/10 train/validation split, and its batch sampling —
//! `batch` random offsets, each a context of `block` tokens and the `block` tokens after them —
//! with the offsets a pure function of a seed, a stream and a step, as everything random in
//! [`crate::data`] is.

use std::path::Path;

use crate::error::{Result, TrainError};
use torchlean_spec::ops::splitmix64;

/// The embedded corpus: 1,115,339 characters of Shakespeare, 77 distinct.
const SHAKESPEARE: &str = include_str!("../../data/shakespeare/input.txt");

/// How the embedded corpus is named in errors.
const SHAKESPEARE_ORIGIN: &str = "shakespeare/input.txt (embedded)";

/// The share of the characters the training split takes (the first 90 %).
pub const TRAIN_SHARE: f64 = 0.9;

/// Characters as token ids: id `i` is the `i`-th of the sorted distinct characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharTokenizer {
    chars: Vec<char>,
}

impl CharTokenizer {
    /// The distinct characters of `text`, sorted.
    pub fn from_text(text: &str) -> CharTokenizer {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        CharTokenizer { chars }
    }

    /// A vocabulary as stored (a checkpoint's): sorted, distinct, not empty.
    pub fn from_vocabulary(vocabulary: &str) -> Result<CharTokenizer> {
        let chars: Vec<char> = vocabulary.chars().collect();
        if chars.is_empty() || chars.windows(2).any(|w| w[0] >= w[1]) {
            return Err(TrainError::BadVocabulary {
                got: vocabulary.to_string(),
            });
        }
        Ok(CharTokenizer { chars })
    }

    /// The vocabulary as one string, sorted ([`CharTokenizer::from_vocabulary`] reads it back).
    pub fn vocabulary(&self) -> String {
        self.chars.iter().collect()
    }

    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The ids of `text`; a character outside the vocabulary is an error naming it and its
    /// position (`what` says what the text is: a prompt, a corpus).
    pub fn encode(&self, what: &'static str, text: &str) -> Result<Vec<usize>> {
        text.chars()
            .enumerate()
            .map(|(position, ch)| {
                self.chars
                    .binary_search(&ch)
                    .map_err(|_| TrainError::UnknownChar {
                        what,
                        ch,
                        position,
                        vocab: self.chars.len(),
                    })
            })
            .collect()
    }

    /// The text of `ids`; an id outside the vocabulary is an error.
    pub fn decode(&self, ids: &[usize]) -> Result<String> {
        ids.iter()
            .map(|&id| {
                self.chars
                    .get(id)
                    .copied()
                    .ok_or(TrainError::TokenOutOfRange {
                        id,
                        vocab: self.chars.len(),
                    })
            })
            .collect()
    }
}

/// Which part of a corpus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The first 90 % of the characters.
    Train,
    /// The last 10 %.
    Val,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

/// A tokenized text split 90/10, each split longer than the block it was checked for.
#[derive(Clone, Debug)]
pub struct TextCorpus {
    origin: String,
    tokenizer: CharTokenizer,
    train: Vec<u32>,
    val: Vec<u32>,
}

impl TextCorpus {
    /// The embedded Shakespeare corpus, checked for contexts of `block` characters.
    pub fn shakespeare(block: usize) -> Result<TextCorpus> {
        TextCorpus::from_text(SHAKESPEARE_ORIGIN, SHAKESPEARE, block)
    }

    /// The UTF-8 text file at `path`, checked for contexts of `block` characters.
    pub fn read(path: &Path, block: usize) -> Result<TextCorpus> {
        let bytes = std::fs::read(path).map_err(|source| TrainError::ReadData {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        let text = String::from_utf8(bytes).map_err(|e| TrainError::TextNotUtf8 {
            origin: origin.clone(),
            position: e.utf8_error().valid_up_to(),
        })?;
        TextCorpus::from_text(&origin, &text, block)
    }

    /// `text` (named `origin` in errors), its tokenizer its own characters.
    pub fn from_text(origin: &str, text: &str, block: usize) -> Result<TextCorpus> {
        let tokenizer = CharTokenizer::from_text(text);
        let ids: Vec<u32> = tokenizer
            .encode("the corpus", text)?
            .into_iter()
            // invariant: a vocabulary has at most as many ids as there are chars (< 2^32)
            .map(|i| u32::try_from(i).expect("a character id fits in 32 bits"))
            .collect();
        let n = ids.len();
        let cut = (n as f64 * TRAIN_SHARE) as usize;
        let (train, val) = ids.split_at(cut);
        for (split, part) in [(Split::Train, train), (Split::Val, val)] {
            if part.len() <= block {
                return Err(TrainError::TextTooShort {
                    origin: origin.to_string(),
                    chars: n,
                    block,
                    split: split.name(),
                    split_chars: part.len(),
                });
            }
        }
        Ok(TextCorpus {
            origin: origin.to_string(),
            tokenizer,
            train: train.to_vec(),
            val: val.to_vec(),
        })
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn tokenizer(&self) -> &CharTokenizer {
        &self.tokenizer
    }

    /// The token ids of `split`.
    pub fn split(&self, split: Split) -> &[u32] {
        match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
        }
    }

    /// nanoGPT's `get_batch`: `batch` offsets drawn uniformly from `0..len − block` of `split`
    /// ([`batch_offsets`]), the contexts `data[i..i + block]` and their targets `data[i + 1..i +
    /// block + 1]`, row-major (`batch × block` each).
    pub fn batch(&self, split: Split, batch: usize, block: usize, draw: Draw) -> TokenBatch {
        let data = self.split(split);
        let offsets = batch_offsets(data.len(), batch, block, draw);
        let mut ids = Vec::with_capacity(batch * block);
        let mut targets = Vec::with_capacity(batch * block);
        for &i in &offsets {
            ids.extend(data[i..i + block].iter().map(|&t| t as usize));
            targets.extend(data[i + 1..i + block + 1].iter().map(|&t| t as usize));
        }
        TokenBatch {
            offsets,
            ids,
            targets,
        }
    }
}

/// Which batch: a pure function of these, so a run can be resumed and replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draw {
    pub seed: u64,
    /// Separates independent uses (training steps, evaluation of each split).
    pub stream: u64,
    /// The step (or evaluation batch) within the stream.
    pub step: u64,
}

/// One batch of contexts and targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBatch {
    /// Where each row starts in its split.
    pub offsets: Vec<usize>,
    pub ids: Vec<usize>,
    pub targets: Vec<usize>,
}

impl TokenBatch {
    /// The rows `rows` of the batch (a rank's share of a global batch).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> TokenBatch {
        let block = self.ids.len().checked_div(self.offsets.len()).unwrap_or(0);
        let tokens = rows.start * block..rows.end * block;
        TokenBatch {
            offsets: self.offsets[rows].to_vec(),
            ids: self.ids[tokens.clone()].to_vec(),
            targets: self.targets[tokens].to_vec(),
        }
    }
}

/// `batch` offsets uniform in `0..len − block` (a split longer than `block`), from `draw`:
/// offset `r` is `⌊u · (len − block) / 2⁶⁴⌋` with `u = splitmix64(splitmix64(seed ^
/// splitmix64(stream)) + step · batch + r)` — the multiply-shift has no modulo bias beyond
/// one part in 2⁶⁴ / (len − block).
pub fn batch_offsets(len: usize, batch: usize, block: usize, draw: Draw) -> Vec<usize> {
    let span = len.saturating_sub(block) as u128;
    let base = splitmix64(draw.seed ^ splitmix64(draw.stream));
    (0..batch as u64)
        .map(|r| {
            let u = splitmix64(
                base.wrapping_add(draw.step.wrapping_mul(batch as u64))
                    .wrapping_add(r),
            );
            // invariant: the product is below span · 2^64, so the shift is below span ≤ usize::MAX
            ((u as u128 * span) >> 64) as usize
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_corpus_is_the_documented_one() {
        let c = TextCorpus::shakespeare(64).unwrap();
        assert_eq!(c.tokenizer().vocab_size(), 77);
        let n = c.split(Split::Train).len() + c.split(Split::Val).len();
        assert_eq!(n, 1_115_339);
        assert_eq!(c.split(Split::Train).len(), 1_003_805);
        // the vocabulary is sorted: newline first, then space
        let v = c.tokenizer().vocabulary();
        assert!(v.starts_with("\n !"), "{v:?}");
    }

    #[test]
    fn encode_and_decode_are_inverse_and_name_a_stranger() {
        let t = CharTokenizer::from_text("hello world");
        assert_eq!(t.vocabulary(), " dehlorw");
        let ids = t.encode("a prompt", "hold").unwrap();
        assert_eq!(ids, [3, 5, 4, 1]);
        assert_eq!(t.decode(&ids).unwrap(), "hold");
        let e = t.encode("a prompt", "help!").unwrap_err();
        assert!(
            matches!(
                e,
                TrainError::UnknownChar {
                    ch: 'p',
                    position: 3,
                    vocab: 8,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("a prompt: character 'p' at position 3"),
            "{e}"
        );
        assert!(matches!(
            t.decode(&[8]),
            Err(TrainError::TokenOutOfRange { id: 8, vocab: 8 })
        ));
        assert_eq!(CharTokenizer::from_vocabulary(&t.vocabulary()).unwrap(), t);
        for bad in ["", "ba", "aab"] {
            assert!(CharTokenizer::from_vocabulary(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_text_too_short_for_the_block_is_refused_naming_the_split() {
        // 20 characters: 18 for training, 2 held out
        let text = "abcdefghijklmnopqrst";
        assert!(TextCorpus::from_text("t", text, 1).is_ok());
        let e = TextCorpus::from_text("t.txt", text, 2).unwrap_err();
        assert!(
            matches!(
                e,
                TrainError::TextTooShort {
                    split: "val",
                    split_chars: 2,
                    block: 2,
                    chars: 20,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("t.txt: 20 characters"), "{e}");
        assert!(matches!(
            TextCorpus::from_text("empty", "", 1),
            Err(TrainError::TextTooShort { chars: 0, .. })
        ));
    }

    #[test]
    fn a_batch_is_contexts_and_their_next_characters_from_the_split() {
        let text: String = (0..200)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let c = TextCorpus::from_text("t", &text, 8).unwrap();
        let draw = Draw {
            seed: 3,
            stream: 0,
            step: 5,
        };
        let b = c.batch(Split::Train, 4, 8, draw);
        assert_eq!(b.ids.len(), 32);
        let train = c.split(Split::Train);
        for (r, &o) in b.offsets.iter().enumerate() {
            assert!(o + 8 < train.len());
            for k in 0..8 {
                assert_eq!(b.ids[r * 8 + k], train[o + k] as usize);
                assert_eq!(b.targets[r * 8 + k], train[o + k + 1] as usize);
            }
        }
        // a pure function of the draw; another step or stream gives other offsets
        assert_eq!(c.batch(Split::Train, 4, 8, draw), b);
        let next = Draw { step: 6, ..draw };
        assert_ne!(c.batch(Split::Train, 4, 8, next).offsets, b.offsets);
        let other = Draw { stream: 1, ..draw };
        assert_ne!(c.batch(Split::Train, 4, 8, other).offsets, b.offsets);
    }

    #[test]
    fn offsets_cover_their_range_evenly() {
        // 10 possible offsets, 20,000 draws: each within 10 % of 2,000
        let mut counts = [0usize; 10];
        for step in 0..1000 {
            let draw = Draw {
                seed: 9,
                stream: 2,
                step,
            };
            for o in batch_offsets(14, 20, 4, draw) {
                counts[o] += 1;
            }
        }
        for c in counts {
            assert!((1800..=2200).contains(&c), "{counts:?}");
        }
    }
}
