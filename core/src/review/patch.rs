//! The JSON Patch of an answer, kept as the text it is sent as: each operation is written once, when it is
//! decided, instead of being built as `serde_json::Value`s, serialised and dropped (which cost a quarter of an
//! admission); the values write themselves ([`WriteJson`]). [`Patch::operations`] parses it back for whoever
//! applies it (tests, the CLI).

use std::collections::BTreeMap;
use std::fmt;

use json_patch::PatchOperation;
use jsonptr::Pointer;
use serde::Serialize;

/// An RFC 6902 JSON Patch: `[op,…]`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Patch {
    /// The operations as a JSON array (UTF-8); empty while there is none.
    json: Vec<u8>,
    len: usize,
}

/// A value the patch adds, written as JSON text straight into it. The shapes the patch adds have fixed keys:
/// serde_json's serialiser escapes each key again at every write, a third of building a patch.
pub(crate) trait WriteJson {
    fn write_json(&self, out: &mut JsonOut<'_>);
}

/// The JSON text of one value.
pub(crate) fn to_json(value: &(impl WriteJson + ?Sized)) -> String {
    let mut json = Vec::new();
    value.write_json(&mut JsonOut { json: &mut json });
    String::from_utf8(json).expect("JSON is written as UTF-8")
}

/// Where a [`WriteJson`] value writes itself: fixed JSON text as it is, strings escaped when they need it.
pub(crate) struct JsonOut<'p> {
    json: &'p mut Vec<u8>,
}

impl JsonOut<'_> {
    /// Fixed JSON text (keys, punctuation), written as it is.
    pub(crate) fn raw(&mut self, text: &'static str) {
        self.json.extend_from_slice(text.as_bytes());
    }

    /// A JSON string.
    pub(crate) fn str(&mut self, s: &str) {
        write_str(self.json, s);
    }

    /// `[item,…]`.
    pub(crate) fn list<T: WriteJson>(&mut self, items: &[T]) {
        self.json.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.json.push(b',');
            }
            item.write_json(self);
        }
        self.json.push(b']');
    }

    /// A value serialised by serde_json.
    fn serialized(&mut self, value: &(impl Serialize + ?Sized)) {
        serde_json::to_writer(&mut *self.json, value).expect("our patch values serialise");
    }
}

impl WriteJson for str {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.str(self);
    }
}

impl WriteJson for &str {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.str(self);
    }
}

impl WriteJson for i32 {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.serialized(self);
    }
}

/// A string map, keys in order.
impl WriteJson for BTreeMap<&str, &str> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw("{");
        for (i, (k, v)) in self.iter().enumerate() {
            if i > 0 {
                out.raw(",");
            }
            out.str(k);
            out.raw(":");
            out.str(v);
        }
        out.raw("}");
    }
}

/// Any JSON value (tests and tools).
impl WriteJson for serde_json::Value {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.serialized(self);
    }
}

impl<T: WriteJson> WriteJson for [T] {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.list(self);
    }
}

impl Patch {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many operations.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends `{"op":"add","path":…,"value":…}` at `path`.
    pub(crate) fn add(&mut self, path: &Pointer, value: &(impl WriteJson + ?Sized)) {
        self.add_under(path, [], value);
    }

    /// Appends `{"op":"add","path":…,"value":…}` at `parent` followed by `tokens` (each escaped: `~` → `~0`,
    /// `/` → `~1`). Most of our paths are constants, whose pointers are written as they are.
    pub(crate) fn add_under<'t>(
        &mut self,
        parent: &Pointer,
        tokens: impl IntoIterator<Item = &'t str>,
        value: &(impl WriteJson + ?Sized),
    ) {
        self.open_operation();
        self.json.extend_from_slice(br#"{"op":"add","path":""#);
        write_str_contents(&mut self.json, parent.as_str());
        for token in tokens {
            self.json.push(b'/');
            write_token(&mut self.json, token);
        }
        self.json.extend_from_slice(br#"","value":"#);
        value.write_json(&mut JsonOut {
            json: &mut self.json,
        });
        self.json.extend_from_slice(b"}]");
    }

    /// Appends any operation (the checkpoint webhook's `test` and `replace`).
    pub fn push(&mut self, op: &PatchOperation) {
        self.open_operation();
        serde_json::to_writer(&mut self.json, op).expect("patch operations serialise");
        self.json.push(b']');
    }

    /// The patch of `ops`, in order.
    pub fn from_operations(ops: &[PatchOperation]) -> Self {
        let mut patch = Self::default();
        for op in ops {
            patch.push(op);
        }
        patch
    }

    /// The JSON text, `[…]` (`[]` when empty), as the bytes sent.
    pub fn as_bytes(&self) -> &[u8] {
        if self.json.is_empty() {
            b"[]"
        } else {
            &self.json
        }
    }

    /// The JSON text, `[…]`.
    pub fn as_json(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("the patch is written as UTF-8")
    }

    /// The operations, parsed back from the text.
    pub fn operations(&self) -> Vec<PatchOperation> {
        serde_json::from_str(self.as_json()).expect("a patch we wrote parses")
    }

    /// Makes room for one more operation: `[` before the first, `,` in place of the closing `]` after that.
    fn open_operation(&mut self) {
        if self.json.is_empty() {
            // A GPU Pod's patch is 2-3 KiB: grown once, not four times.
            self.json.reserve(4096);
            self.json.push(b'[');
        } else {
            self.json.pop();
            self.json.push(b',');
        }
        self.len += 1;
    }
}

/// One path token, RFC 6901-escaped (`~` → `~0`, `/` → `~1`, as `jsonptr::Token` encodes it, without its ~450
/// instructions a token) inside the path's JSON string.
fn write_token(json: &mut Vec<u8>, token: &str) {
    let mut rest = token;
    // Both are ASCII: the text either side of one is UTF-8.
    while let Some(i) = memchr::memchr2(b'~', b'/', rest.as_bytes()) {
        write_str_contents(json, &rest[..i]);
        let escaped: &[u8] = if rest.as_bytes()[i] == b'~' {
            b"~0"
        } else {
            b"~1"
        };
        json.extend_from_slice(escaped);
        rest = &rest[i + 1..];
    }
    write_str_contents(json, rest);
}

/// A JSON string: copied as it is when nothing in it needs escaping (most of what we write: names, labels,
/// numbers as text), else escaped by serde_json.
pub(crate) fn write_str(json: &mut Vec<u8>, s: &str) {
    json.reserve(s.len() + 2);
    json.push(b'"');
    write_str_contents(json, s);
    json.push(b'"');
}

/// What goes between a JSON string's quotes. Inlined where it is called (some sixty times a patch): the
/// check and the copy are a few dozen instructions, the call's set-up was a third of that.
#[inline]
fn write_str_contents(json: &mut Vec<u8>, s: &str) {
    if is_plain(s.as_bytes()) {
        json.extend_from_slice(s.as_bytes());
    } else {
        write_escaped_contents(json, s);
    }
}

#[cold]
fn write_escaped_contents(json: &mut Vec<u8>, s: &str) {
    let quoted = serde_json::to_string(s).expect("a string always serialises");
    json.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
}

/// Nothing in `s` needs escaping in a JSON string (no control character, quote or backslash). Our strings are
/// short (names, keys, labels): they are looked at eight bytes at a time, the last eight overlapping the ones
/// before, and a shorter string as one word padded with spaces.
fn is_plain(bytes: &[u8]) -> bool {
    let word_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    if bytes.len() < 8 {
        let mut padded = [b' '; 8];
        padded[..bytes.len()].copy_from_slice(bytes);
        return !needs_escape(u64::from_le_bytes(padded));
    }
    let whole = bytes.len() - bytes.len() % 8;
    (0..whole).step_by(8).all(|i| !needs_escape(word_at(i)))
        && !needs_escape(word_at(bytes.len() - 8))
}

/// Some byte of `word` is below 0x20, a quote or a backslash. `(x - 0x01…01·n) & !x & 0x80…80` is not zero
/// exactly when some byte of `x` is below `n` (n ≤ 0x80; `!x` leaves out the bytes from 0x80 up); a byte equal
/// to `c` is a zero byte of `x ^ 0x01…01·c`.
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    (below(word, 0x20) | below(quote, 1) | below(backslash, 1)) != 0
}

impl fmt::Debug for Patch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_patch::AddOperation;
    use jsonptr::PointerBuf;
    use serde_json::json;

    #[test]
    fn written_like_json_patch_serialises_its_operations() {
        let ops = vec![
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["metadata", "annotations", "gpu-admission.io/x~y"]),
                value: json!("a \"quoted\" value"),
            }),
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["spec", "tolerations", "-"]),
                value: json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"}),
            }),
        ];
        let mut patch = Patch::default();
        assert!(patch.is_empty() && patch.as_json() == "[]");
        patch.add_under(
            Pointer::from_static("/metadata/annotations"),
            ["gpu-admission.io/x~y"],
            "a \"quoted\" value",
        );
        patch.add(
            Pointer::from_static("/spec/tolerations/-"),
            &json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"}),
        );
        assert_eq!(patch.len(), 2);
        assert_eq!(patch.as_json(), serde_json::to_string(&ops).unwrap());
        assert_eq!(patch.operations(), ops);
        assert_eq!(Patch::from_operations(&ops), patch);
    }

    /// Every byte value at every place of a word and of the rest, with plain bytes around it.
    #[test]
    fn plain_is_no_control_character_quote_or_backslash() {
        let naive = |b: &[u8]| b.iter().all(|&c| c >= 0x20 && c != b'"' && c != b'\\');
        for len in 0..=20 {
            for at in 0..len {
                for fill in [b'a', 0x7f, 0x80, 0xff, b'!', b'#', b'[', b']'] {
                    for byte in 0..=255u8 {
                        let mut text = vec![fill; len];
                        text[at] = byte;
                        assert_eq!(is_plain(&text), naive(&text), "{text:?}");
                    }
                }
            }
        }
        // Several odd bytes at once (borrows running across bytes), from a fixed xorshift sequence.
        let alphabet = [
            0u8, 0x1f, 0x20, 0x21, b'"', b'\\', 0x5b, 0x5d, b'a', 0x7f, 0x80, 0x9f, 0xa0, 0xff,
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 24) as usize;
            let text: Vec<u8> = (0..len)
                .map(|i| alphabet[((state >> (i * 2)) % alphabet.len() as u64) as usize])
                .collect();
            assert_eq!(is_plain(&text), naive(&text), "{text:?}");
        }
        for s in [
            "",
            "gpu-admission.io/priority-score",
            "ünïcödé ✓ and more",
            "a\"b",
        ] {
            assert_eq!(is_plain(s.as_bytes()), naive(s.as_bytes()), "{s:?}");
        }
    }

    #[test]
    fn strings_are_escaped_only_when_they_need_it() {
        for s in [
            "plain text: a=1,b=0.5",
            "tab\there",
            "quote \" and \\",
            "ünïcödé ✓",
            "\u{1}",
            "",
        ] {
            let mut patch = Patch::default();
            patch.add(Pointer::from_static("/a"), s);
            let ops = patch.operations();
            let PatchOperation::Add(add) = &ops[0] else {
                panic!("{ops:?}")
            };
            assert_eq!(add.value, serde_json::Value::String(s.into()));
            let mut by_serde = Patch::default();
            by_serde.add(
                Pointer::from_static("/a"),
                &serde_json::Value::String(s.into()),
            );
            assert_eq!(patch, by_serde);
            // The same text as a path token (and with `~` and `/` to encode): what json_patch writes.
            for token in [s.to_string(), format!("{s}~/x"), format!("/~{s}~1//~")] {
                let mut patch = Patch::default();
                patch.add_under(Pointer::from_static("/a"), [token.as_str()], "v");
                let op = PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["a", token.as_str()]),
                    value: json!("v"),
                });
                assert_eq!(
                    patch.as_json(),
                    serde_json::to_string(&[op]).unwrap(),
                    "{token:?}"
                );
            }
        }
    }
}
