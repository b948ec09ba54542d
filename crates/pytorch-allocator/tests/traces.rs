//! The allocator against PyTorch itself: six traces of PyTorch's caching allocator recorded on an
//! H200 (`tests/data/README.md`), replayed byte for byte, and PyTorch's verdicts under a cap.

use pytorch_allocator::{
    replay, replay_with, smallest_cap, smallest_cap_with, AllocConf, Allocator, Device, Event,
    SegmentId,
};
use std::io::Read;
use std::path::Path;

const GIB: f64 = (1u64 << 30) as f64;

struct Trace {
    events: Vec<Event>,
    /// The sizes of the segments PyTorch made, in order.
    segments: Vec<u64>,
    max_reserved: u64,
    max_alloc: u64,
    retries: u64,
}

fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// A trace as the stream PyTorch's allocator saw. Recording began after `torch.empty(1)` had made
/// one 2 MiB small segment and freed its block: the stream starts by doing the same.
fn load(name: &str) -> Trace {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(data(name)).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut events = vec![Event::Alloc { id: 0, size: 512 }, Event::Free { id: 0 }];
    let mut segments = Vec::new();
    for e in json["events"].as_array().unwrap() {
        let (action, id, size) = (
            e[0].as_str().unwrap(),
            e[1].as_u64().unwrap(),
            e[2].as_u64().unwrap(),
        );
        match action {
            "alloc" => events.push(Event::Alloc { id, size }),
            "free_completed" => events.push(Event::Free { id }),
            "segment_alloc" => segments.push(size),
            _ => {}
        }
    }
    let meta = &json["meta"];
    Trace {
        events,
        segments,
        max_reserved: meta["max_reserved"].as_u64().unwrap(),
        max_alloc: meta["max_alloc"].as_u64().unwrap(),
        retries: meta["retries"].as_u64().unwrap(),
    }
}

/// A device that notes every segment it is asked for.
#[derive(Default)]
struct Noting(Vec<u64>);

impl Device for Noting {
    fn allocate(&mut self, _: SegmentId, size: u64) -> bool {
        self.0.push(size);
        true
    }
}

/// The segments the allocator makes for a stream, without a cap.
fn segments_made(events: &[Event]) -> Vec<u64> {
    let (mut a, mut device) = (Allocator::new(None), Noting::default());
    let mut live = std::collections::HashMap::new();
    for e in events {
        match *e {
            Event::Alloc { id, size } => {
                live.insert(id, a.malloc(size, &mut device).unwrap().id);
            }
            Event::Free { id } => {
                if let Some(b) = live.remove(&id) {
                    a.free(b);
                }
            }
            // PyTorch's traces hold a workspace as the request it was: recorded, none are here.
            Event::Workspace { .. } => unreachable!("a PyTorch trace holds no engine list"),
        }
    }
    device.0
}

const TRACES: [&str; 6] = [
    "r101-os8-1024-b2.json.gz",
    "r101-os8-1024-b3.json.gz",
    "r101-os8-848-b4.json.gz",
    "r101-os8-856-b4.json.gz",
    "r101-os8-864-b4.json.gz",
    "r101-os8-872-b4.json.gz",
];

#[test]
fn uncapped_the_replay_makes_pytorchs_segments_and_peaks_to_the_byte() {
    for name in TRACES {
        let trace = load(name);
        assert_eq!(trace.retries, 0, "{name}: recorded uncapped");
        let r = replay(&trace.events, None);
        assert!(r.fits(), "{name}");
        assert_eq!(
            r.stats.peak_reserved, trace.max_reserved,
            "{name}: peak reserved"
        );
        assert_eq!(
            r.stats.peak_allocated, trace.max_alloc,
            "{name}: peak allocated"
        );
        let made = segments_made(&trace.events);
        assert_eq!(
            made[0],
            2 << 20,
            "{name}: the segment made before recording"
        );
        assert_eq!(
            made[1..],
            trace.segments[..],
            "{name}: every segment, in order"
        );
    }
}

/// One row of `truth.md`: the trace's file, the cap, PyTorch's verdict, peaks and retries.
struct Truth {
    file: String,
    cap: u64,
    fits: bool,
    peak_allocated: f64,
    peak_reserved: f64,
    retries: u64,
}

/// The rows of `truth.md`'s table under the heading that starts with `heading`, split in cells.
fn table(heading: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(data("truth.md")).unwrap();
    let lines = text.lines().skip_while(|l| !l.starts_with(heading)).skip(1);
    let section = lines.take_while(|l| !l.starts_with('#'));
    section
        .filter(|l| l.starts_with("| R"))
        .map(|row| row.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// A row's trace file.
fn file_of(run: &str) -> String {
    format!("{}.json.gz", run.to_lowercase().replace(' ', "-"))
}

fn truth() -> Vec<Truth> {
    let rows = table("# PyTorch's verdicts");
    rows.iter()
        .map(|cells| {
            let gib = |i: usize| cells[i].parse::<f64>().unwrap();
            Truth {
                file: file_of(&cells[1]),
                cap: (gib(2) * GIB) as u64,
                fits: cells[3] == "fits",
                peak_allocated: gib(4),
                peak_reserved: gib(5),
                retries: cells[6].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn capped_the_replay_gives_pytorchs_verdict_retries_and_peaks() {
    let rows = truth();
    assert_eq!(rows.len(), 6);
    for t in rows {
        let r = replay(&load(&t.file).events, Some(t.cap));
        assert_eq!(r.fits(), t.fits, "{}: verdict", t.file);
        assert_eq!(r.stats.retries, t.retries, "{}: num_alloc_retries", t.file);
        let close = |bytes: u64, gib: f64| (bytes as f64 / GIB - gib).abs() < 0.0006;
        assert!(
            close(r.stats.peak_reserved, t.peak_reserved),
            "{}: peak reserved {}",
            t.file,
            r.stats.peak_reserved as f64 / GIB
        );
        assert!(
            close(r.stats.peak_allocated, t.peak_allocated),
            "{}: peak allocated {}",
            t.file,
            r.stats.peak_allocated as f64 / GIB
        );
    }
}

#[test]
fn the_smallest_cap_brackets_pytorchs_verdicts() {
    for t in truth() {
        let need = smallest_cap(&load(&t.file).events);
        assert_eq!(
            need.cap <= t.cap,
            t.fits,
            "{}: need {:.3} GiB",
            t.file,
            need.cap as f64 / GIB
        );
        assert!(need.at_cap.fits());
        assert!(!replay(&load(&t.file).events, Some(need.cap - 1)).fits());
        assert!(need.cap >= need.at_cap.stats.peak_allocated);
    }
}

/// Under `expandable_segments:True` (`truth.md`'s second table): replayed with the setting, each
/// stored trace gives PyTorch's own peaks to the byte without a cap, and its verdict, retries and
/// peaks under the 23.483 GiB cap; the smallest cap it fits under is below the default's.
#[test]
fn expandable_segments_replay_as_pytorch_holds_them() {
    let conf = AllocConf {
        expandable_segments: true,
    };
    let rows = table("## Under `expandable_segments:True`");
    assert_eq!(rows.len(), 6);
    let cap = (23.483 * GIB) as u64;
    for cells in rows {
        let file = file_of(&cells[1]);
        let bytes = |i: usize| cells[i].parse::<u64>().unwrap();
        let events = load(&file).events;
        let r = replay_with(&events, None, conf).stats;
        let uncapped = (r.peak_allocated, r.peak_reserved);
        assert_eq!(uncapped, (bytes(2), bytes(3)), "{file}: uncapped peaks");
        let c = replay_with(&events, Some(cap), conf);
        assert_eq!(c.fits(), cells[4] == "fits", "{file}: verdict");
        let capped = (
            c.stats.peak_allocated,
            c.stats.peak_reserved,
            c.stats.retries,
        );
        assert_eq!(capped, (bytes(5), bytes(6), bytes(7)), "{file}: capped");
        let (fixed, grown) = (smallest_cap(&events), smallest_cap_with(&events, conf));
        let gib = |b: u64| b as f64 / GIB;
        eprintln!(
            "{file}: needs {:.2} GiB, {:.2} with expandable segments (peak allocated {:.2})",
            gib(fixed.cap),
            gib(grown.cap),
            gib(fixed.at_cap.stats.peak_allocated)
        );
        assert!(grown.cap < fixed.cap, "{file}");
        assert!(grown.at_cap.fits());
        assert!(!replay_with(&events, Some(grown.cap - 1), conf).fits());
    }
}
