//! Words for a shell: what the "Reproduce with" lines and `--exec`'s `{config}` are made of.

/// `word` as one shell word: as it is when it holds nothing the shell would read, else in single
/// quotes (a `'` inside becomes `'\''`).
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}
