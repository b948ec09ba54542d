//! Stream-only trials, without a GPU: the training issued for a virtual card asks for the buffers
//! an H100 asked for, request for request (its streams are stored); the same trial asks the same
//! in every run; a diagnosis on streams certifies its verdicts and searches again where a
//! certificate disagrees (the estimate stands in for the GPU).

use crate::common::*;
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// A stream as `OOM_BISECT_STREAM_OUT` writes it: the bytes before it, and its events.
fn stream(path: &Path) -> (u64, Vec<Value>) {
    let mut text = String::new();
    let file = std::fs::File::open(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => flate2::read::GzDecoder::new(file).read_to_string(&mut text),
        _ => std::io::BufReader::new(file).read_to_string(&mut text),
    }
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let events = v["events"].as_array().unwrap().clone();
    (v["before"].as_u64().unwrap(), events)
}

/// The stream of a stream-only trial of `config` with `sets`, for a virtual H100 under 76 GiB.
fn virtual_h100(name: &str, config: &str, sets: &[&str]) -> (u64, Vec<Value>) {
    let d = tmp(name);
    let out = d.join("stream.json");
    let cfg = root().join(config);
    let mut args = vec![
        "trial",
        "--config",
        cfg.to_str().unwrap(),
        "--backend",
        "cuda",
        "--evidence",
        "stream",
        "--memory-limit",
        "76GiB",
        "--set",
        "device.gpu=\"h100\"",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let o = std::process::Command::new(BIN)
        .args(&args)
        .current_dir(&d)
        .env("OOM_BISECT_STREAM_OUT", &out)
        .output()
        .unwrap();
    assert!(
        matches!(code(&o), 0 | 3),
        "the trial reached a verdict: {}",
        text(&o)
    );
    stream(&out)
}

/// The first place two streams differ, for a message.
fn first_difference(a: &[Value], b: &[Value]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("event {i}: {} here, {} on the H100", a[i], b[i]),
        None => format!("{} events here, {} on the H100", a.len(), b.len()),
    }
}

#[test]
fn a_virtual_h100_asks_for_what_the_h100_asked_for() {
    let cases: [(&str, &str, &[&str]); 3] = [
        (
            "forum-b2",
            "configs/forum-r101-os8-1024.toml",
            &["data.batch=2"],
        ),
        (
            "forum-bf16",
            "configs/forum-r101-os8-1024.toml",
            &["train.precision=\"bf16\""],
        ),
        (
            "r50-os16-512-b33",
            "configs/deeplabv3plus-r50-os8.toml",
            &[
                "model.output_stride=16",
                "data.size=[512, 512]",
                "data.batch=33",
            ],
        ),
    ];
    for (name, config, sets) in cases {
        let stored = root().join(format!("tests/data/h100-streams/{name}.json.gz"));
        let (h100_before, h100) = stream(&stored);
        let (before, here) = virtual_h100(name, config, sets);
        assert!(
            here == h100,
            "{name}: the stream differs from the H100's at {}",
            first_difference(&here, &h100)
        );
        // The context the card table assumes is the one the H100 held.
        assert_eq!(before, h100_before, "{name}");
    }
}

/// The device's thread lags the program's by however long a launch takes; a block's release is
/// noted in the program's order all the same, so the same trial, issued twice at once on a loaded
/// host, asks for the same buffers in the same order.
#[test]
fn a_stream_only_trial_repeats_request_for_request() {
    let run = |i: usize| {
        std::thread::spawn(move || {
            virtual_h100(
                &format!("repeat-{i}"),
                "configs/forum-r101-os8-1024.toml",
                &["data.batch=2", "data.size=[512, 512]"],
            )
        })
    };
    let (a, b) = (run(0), run(1));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert!(a == b, "{}", first_difference(&a.1, &b.1));
}

/// Without a GPU a diagnosis runs on streams for the card `--gpu` names; certified (here by the
/// estimate, standing in for the GPU), every verdict the report rests on is run again, a verdict
/// that disagrees is the certifier's, and the report, the JSON and each trial say where each
/// verdict came from.
#[test]
fn a_diagnosis_on_streams_is_certified_and_says_where_each_verdict_came_from() {
    let d = tmp("certified");
    let cfg = root().join("configs/quickstart.toml");
    let j = d.join("r.json");
    let o = run(
        &[
            "bisect",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "cuda",
            "--set",
            "device.gpu=\"rtx3090\"",
            "--memory-limit",
            "800MiB",
            "--axes",
            "batch",
            "--certify-with-estimate",
            "--json",
            j.to_str().unwrap(),
            "-q",
        ],
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("Evidence: every probe of the search is a stream-only trial")
            && t.contains("a virtual NVIDIA GeForce RTX 3090 24 GB"),
        "{t}"
    );
    assert!(
        t.contains("\nCertificates (run on the GPU under the ceiling"),
        "{t}"
    );
    let r = json(&j);
    let certs = r["evidence"]["certificates"].as_array().unwrap();
    assert!(
        certs.iter().any(|c| c["what"] == "the original"),
        "{certs:?}"
    );
    // The estimate leaves out the CUDA context: it fits where the streams run out of memory, and
    // the search runs again from its verdicts.
    assert!(certs.iter().any(|c| c["agrees"] == false), "{certs:?}");
    assert!(
        r["evidence"]["searches"].as_u64().unwrap() >= 2,
        "{}",
        r["evidence"]
    );
    // The estimate keeps disagreeing, so the rounds run out: what the last search's report rests
    // on and no certificate covers is named as the streams' alone.
    let uncertified = r["evidence"]["uncertified"].as_array().unwrap();
    assert!(!uncertified.is_empty(), "{}", r["evidence"]);
    assert!(t.contains("are the streams' alone: "), "{t}");
    let trials = r["trials"]["list"].as_array().unwrap();
    assert!(
        trials
            .iter()
            .all(|t| t["evidence"]["kind"] == "stream" && t["evidence"]["card"] != Value::Null),
        "{trials:?}"
    );
}
