//! Config values as TOML text, written in one place: the overrides the search tries are
//! `key=value` pairs whose values are TOML. They are read back only through the candidate's
//! `Config` (`Config::with_overrides`), never parsed by hand.

/// A TOML string: `"decoder"`, with `\` and `"` escaped.
pub fn string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A TOML array of strings: `["aspp.branch1", "decoder"]`.
pub fn strings<S: AsRef<str>>(list: &[S]) -> String {
    let items: Vec<String> = list.iter().map(|s| string(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_read_back_as_toml() {
        let v = super::strings(&["a\"b", "c\\d"]);
        let t: toml::Table = toml::from_str(&format!("v = {v}")).unwrap();
        assert_eq!(t["v"].as_array().unwrap()[0].as_str(), Some("a\"b"));
        assert_eq!(t["v"].as_array().unwrap()[1].as_str(), Some("c\\d"));
        assert_eq!(super::strings::<&str>(&[]), "[]");
    }
}
