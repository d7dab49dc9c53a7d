//! Session ids as directory names (`store.md` STORE-3, STORE-4): one path segment, no
//! traversal, injective for ids up to the length limit.

/// Escaped names longer than this are shortened with a hash (STORE-4).
const NAME_BYTES_MAX: usize = 200;

/// The directory name of session `id`: ASCII letters, digits, `_` and `-` stay; every
/// other byte of the UTF-8 id becomes `%XX` (uppercase hex), so `/`, `.`, `..` and NUL
/// cannot form a path, and distinct ids give distinct names. A name longer than 200 bytes
/// keeps its first 160 bytes followed by `~` and 32 hex digits of a 128-bit FNV-1a hash of
/// the id; the header file inside holds the real id, so a hash collision is detected
/// rather than confused.
pub fn escape_id(id: &str) -> String {
    let mut name = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            name.push(char::from(byte));
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            name.push('%');
            name.push(char::from(HEX[usize::from(byte >> 4)]));
            name.push(char::from(HEX[usize::from(byte & 0xF)]));
        }
    }
    if name.len() <= NAME_BYTES_MAX {
        return name;
    }
    name.truncate(160);
    format!("{name}~{:032x}", fnv1a_128(id.as_bytes()))
}

/// FNV-1a, 128-bit: stable across builds and platforms (unlike `std`'s hasher).
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::escape_id;

    #[test]
    fn store_3_names_are_one_safe_segment_and_injective() {
        let ids = [
            "a", "A", "a/b", "a%2Fb", "..", ".", "x.y", "é", "🙂", "a b", "-_", "%", "a\u{0}b",
        ];
        let names: Vec<String> = ids.iter().map(|id| escape_id(id)).collect();
        for name in &names {
            assert!(
                !name.contains('/') && !name.contains('.') && !name.contains('\0'),
                "{name}"
            );
            assert!(!name.is_empty());
        }
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(escape_id("a/b"), "a%2Fb");
        assert_ne!(escape_id("a/b"), escape_id("a%2Fb"));
    }

    #[test]
    fn store_4_long_ids_are_shortened_with_a_hash() {
        let long_a = "a".repeat(300);
        let long_b = format!("{}b", "a".repeat(299));
        let (name_a, name_b) = (escape_id(&long_a), escape_id(&long_b));
        assert!(name_a.len() <= 200 && name_b.len() <= 200);
        assert_ne!(name_a, name_b);
        assert_eq!(escape_id(&long_a), name_a, "stable");
    }
}
