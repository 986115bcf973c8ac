//! The JSON Patch of an answer, kept as the text it is sent as: each operation is written once, when it is
//! decided, instead of being built as `serde_json::Value`s, serialised and dropped (which cost a quarter of an
//! admission). [`Patch::operations`] parses it back for whoever applies it (tests, the CLI).

use std::fmt;

use json_patch::PatchOperation;
use jsonptr::Token;
use serde::Serialize;

/// An RFC 6902 JSON Patch: `[op,…]`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Patch {
    /// The operations as a JSON array (UTF-8); empty while there is none.
    json: Vec<u8>,
    len: usize,
}

impl Patch {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many operations.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends `{"op":"add","path":…,"value":…}`: the path of `tokens` (escaped by `jsonptr`: `~` → `~0`, `/` → `~1`), the
    /// value serialised as it is (a map's keys in their serialisation order).
    pub fn add<'t>(&mut self, tokens: impl IntoIterator<Item = &'t str>, value: &impl Serialize) {
        self.open_add(tokens);
        self.write(value);
        self.json.extend_from_slice(b"}]");
    }

    /// [`Patch::add`] of a string value.
    pub fn add_str<'t>(&mut self, tokens: impl IntoIterator<Item = &'t str>, value: &str) {
        self.open_add(tokens);
        self.write_str(value);
        self.json.extend_from_slice(b"}]");
    }

    /// `{"op":"add","path":"…","value":` of a new operation: the path written straight into the patch.
    fn open_add<'t>(&mut self, tokens: impl IntoIterator<Item = &'t str>) {
        self.open_operation();
        self.json.extend_from_slice(br#"{"op":"add","path":""#);
        for token in tokens {
            self.json.push(b'/');
            // `Token::new` costs ~450 instructions even for a token with nothing to escape (most of ours).
            if token.bytes().any(|b| b == b'~' || b == b'/') {
                self.write_str_contents(Token::new(token).encoded());
            } else {
                self.write_str_contents(token);
            }
        }
        self.json.extend_from_slice(br#"","value":"#);
    }

    /// A JSON string: copied as it is when nothing in it needs escaping (most of what we write: names,
    /// labels, numbers as text), else escaped by serde_json.
    fn write_str(&mut self, s: &str) {
        self.json.reserve(s.len() + 2);
        self.json.push(b'"');
        self.write_str_contents(s);
        self.json.push(b'"');
    }

    /// What goes between a JSON string's quotes.
    fn write_str_contents(&mut self, s: &str) {
        if is_plain(s) {
            self.json.extend_from_slice(s.as_bytes());
        } else {
            let quoted = serde_json::to_string(s).expect("a string always serialises");
            self.json
                .extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
        }
    }

    /// Appends any operation (the checkpoint webhook's `test` and `replace`).
    pub fn push(&mut self, op: &PatchOperation) {
        self.open_operation();
        self.write(op);
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
        std::str::from_utf8(self.as_bytes()).expect("serde_json writes UTF-8")
    }

    /// The operations, parsed back from the text.
    pub fn operations(&self) -> Vec<PatchOperation> {
        serde_json::from_str(self.as_json()).expect("a patch we wrote parses")
    }

    /// Makes room for one more operation: `[` before the first, `,` in place of the closing `]` after that.
    fn open_operation(&mut self) {
        if self.json.is_empty() {
            self.json.reserve(512);
            self.json.push(b'[');
        } else {
            self.json.pop();
            self.json.push(b',');
        }
        self.len += 1;
    }

    fn write(&mut self, value: &(impl Serialize + ?Sized)) {
        serde_json::to_writer(&mut self.json, value).expect("our patch values serialise");
    }
}

/// Nothing in `s` needs escaping in a JSON string. Every byte is looked at (no early exit), which the
/// compiler turns into a vectorised scan.
fn is_plain(s: &str) -> bool {
    s.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    })
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
        patch.add_str(
            ["metadata", "annotations", "gpu-admission.io/x~y"],
            "a \"quoted\" value",
        );
        patch.add(
            ["spec", "tolerations", "-"],
            &json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"}),
        );
        assert_eq!(patch.len(), 2);
        assert_eq!(patch.as_json(), serde_json::to_string(&ops).unwrap());
        assert_eq!(patch.operations(), ops);
        assert_eq!(Patch::from_operations(&ops), patch);
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
            patch.add_str(["a"], s);
            let ops = patch.operations();
            let PatchOperation::Add(add) = &ops[0] else {
                panic!("{ops:?}")
            };
            assert_eq!(add.value, serde_json::Value::String(s.into()));
            let mut by_serde = Patch::default();
            by_serde.add(["a"], &s);
            assert_eq!(patch, by_serde);
            // The same text as a path token (and with `~` and `/` to encode): what json_patch writes.
            for token in [s.to_string(), format!("{s}~/x")] {
                let mut patch = Patch::default();
                patch.add_str(["a", token.as_str()], "v");
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
