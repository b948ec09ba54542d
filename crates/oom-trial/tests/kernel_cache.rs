//! cubecl's kernel cache under concurrent trials: two writers appending to one cache lose nothing
//! and corrupt nothing, a cut entry (a trial killed mid-append) costs only itself, and a cache that
//! would crash cubecl is found by `oom_trial::cache::check` and set aside by `cache::usable`;
//! `cache::compiled_bytes` counts what every trial reads from it.

use cubecl_common::cache::CacheOption;
use cubecl_common::compilation_cache::CompilationCache;
use std::path::{Path, PathBuf};

type Kernels = CompilationCache<String, String>;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oom-bisect-kc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The cache as a trial opens it: cubecl's layout under `root`.
fn open(root: &Path) -> Kernels {
    CompilationCache::new("ptx", CacheOption::default().root(root).name("cuda"))
}

/// A kernel's text: a few KiB, different for each key, like PTX.
fn ptx(key: &str) -> String {
    format!("// {key}\n").repeat(200 + key.len() * 13)
}

/// A cache under `root` holding kernels `k0`, `k1`, … (`n` of them), closed again.
fn filled(name: &str, n: usize) -> PathBuf {
    let root = dir(name);
    let mut c = open(&root);
    for i in 0..n {
        let k = format!("k{i}");
        c.insert(k.clone(), ptx(&k)).unwrap();
    }
    root
}

fn the_chunk(root: &Path) -> PathBuf {
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "cbor") {
                return p;
            }
        }
    }
    panic!("no chunk under {}", root.display())
}

/// Two writers (two trials compiling at once), each with its own handle on the files as separate
/// processes have, insert 150 kernels of their own and 40 that both compile; a third handle then
/// reads every one of them back intact.
#[test]
fn two_concurrent_writers_lose_and_corrupt_nothing() {
    let root = dir("concurrent");
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let root = root.clone();
            std::thread::spawn(move || {
                let mut c = open(&root);
                for i in 0..150 {
                    let k = format!("writer{w}-kernel{i}");
                    c.insert(k.clone(), ptx(&k)).unwrap();
                    let shared = format!("shared-kernel{}", i % 40);
                    let _ = c.insert(shared.clone(), ptx(&shared));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("a writer panicked");
    }
    let c = open(&root);
    for w in 0..2 {
        for i in 0..150 {
            let k = format!("writer{w}-kernel{i}");
            assert_eq!(c.get(&k), Some(&ptx(&k)), "{k}");
        }
    }
    for i in 0..40 {
        let k = format!("shared-kernel{i}");
        assert_eq!(c.get(&k), Some(&ptx(&k)), "{k}");
    }
    assert!(oom_trial::cache::check(&root).is_ok());
}

/// A cut entry at the end of the chunk (a trial killed mid-append) loses only itself: the cache
/// still opens, the kernels before it are there, and the check finds nothing to set aside.
#[test]
fn a_cut_entry_costs_only_itself() {
    let root = filled("cut", 5);
    let chunk = the_chunk(&root);
    let bytes = std::fs::read(&chunk).unwrap();
    let whole = bytes.len();
    std::fs::write(&chunk, &bytes[..whole - 100]).unwrap();
    let c = open(&root);
    for i in 0..4 {
        let k = format!("k{i}");
        assert_eq!(c.get(&k), Some(&ptx(&k)), "{k}");
    }
    assert!(oom_trial::cache::check(&root).is_ok());
}

/// A table of contents naming a chunk that is gone would make cubecl panic on the first lookup:
/// the check names it, and `usable` moves the cache aside and starts a fresh one.
#[test]
fn a_cache_that_would_crash_cubecl_is_set_aside() {
    let root = filled("broken", 1);
    std::fs::remove_file(the_chunk(&root)).unwrap();
    let why = oom_trial::cache::check(&root).unwrap_err();
    assert!(why.contains("chunk0.cbor"), "{why}");
    let (dir, said) = oom_trial::cache::usable(Some(root.clone()));
    assert_eq!(dir.as_deref(), Some(root.as_path()));
    assert!(said.unwrap().contains("moved to"));
    assert!(oom_trial::cache::check(&root).is_ok());
    let mut c = open(&root);
    c.insert("k".into(), ptx("k")).unwrap();
}

/// What every trial reads as it starts is the chunk's bytes: counted from cubecl's own files, and
/// nothing for a cache without kernels.
#[test]
fn the_compiled_bytes_are_the_chunks() {
    let root = filled("size", 12);
    let chunk = std::fs::metadata(the_chunk(&root)).unwrap().len();
    assert!(chunk > 12 * 1000, "{chunk}");
    assert_eq!(oom_trial::cache::compiled_bytes(&root), chunk);
    assert_eq!(oom_trial::cache::compiled_bytes(&dir("empty")), 0);
}
