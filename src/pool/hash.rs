//! Template hashes: a short, stable digest of what children are rendered from.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The first 10 hex digits of the SHA-256 of the JSON form of `value` (struct fields and
/// BTreeMaps serialize in a fixed order, so equal templates hash equal). A valid label value.
pub fn of<T: Serialize>(value: &T) -> String {
    // Templates are structs and string-keyed maps: they always serialize (an error would
    // hash as empty, and the next render would fail visibly at the API server).
    let json = serde_json::to_vec(value).unwrap_or_default();
    let digest = Sha256::digest(&json);
    digest.iter().take(5).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn stable_and_sensitive() {
        let a = super::of(&serde_json::json!({"a": 1, "b": [1, 2]}));
        assert_eq!(a, super::of(&serde_json::json!({"a": 1, "b": [1, 2]})));
        assert_ne!(a, super::of(&serde_json::json!({"a": 2, "b": [1, 2]})));
        assert_eq!(a.len(), 10);
    }
}
