//! RFC 6902 `add` operations written into the answer's [`Patch`] (which escapes `~` and `/` in path tokens): a
//! missing parent is added whole, with its new members inside, before anything is added under it; arrays are
//! appended with `/-`.

use std::collections::BTreeMap;

use jsonptr::Pointer;

use crate::review::{Patch, WriteJson};

/// Adds `members` to the map at `parent`: one `add` of the whole map when it is missing (or null), else one
/// `add` per member.
pub(super) fn add_to_map(
    patch: &mut Patch,
    parent: &Pointer,
    exists: bool,
    members: &[(&str, &str)],
) {
    if members.is_empty() {
        return;
    }
    if exists {
        for (k, v) in members {
            patch.add_under(parent, [*k], *v);
        }
    } else {
        let map: BTreeMap<&str, &str> = members.iter().copied().collect();
        patch.add(parent, &map);
    }
}

/// Appends `items` to the array at `parent` (`/-`), or adds the whole array when it is missing.
pub(super) fn append_to_array<T: WriteJson>(
    patch: &mut Patch,
    parent: &Pointer,
    exists: bool,
    items: &[T],
) {
    if items.is_empty() {
        return;
    }
    if exists {
        for item in items {
            patch.add_under(parent, ["-"], item);
        }
    } else {
        patch.add(parent, items);
    }
}
