//! Everything a user reads: the diagnosis (text and JSON), a trial's table, `inspect`'s tree,
//! `bench`'s timings, the progress on stderr, and the one-line title of a workload. Only this module
//! formats; the commands orchestrate.

pub mod bench;
pub mod inspect;
pub mod progress;
pub mod report;
pub mod trial_table;

use deeplab::{Config, Optimizer};

/// `DeepLabV3+ resnet18 OS8, batch 4, 96×96, 21 classes, f32, SGD, attention ×4`.
pub fn title(c: &Config) -> String {
    let m = &c.model;
    let mut extras = vec![];
    if c.train.checkpointing {
        extras.push("checkpointing".to_string());
    }
    if m.separable {
        extras.push("separable".to_string());
    }
    if m.attention_heads > 0 {
        extras.push(format!("attention ×{}", m.attention_heads));
    }
    if m.aux_head {
        extras.push("aux head".into());
    }
    if !m.identity.is_empty() {
        extras.push(format!("identity {:?}", m.identity));
    }
    if let Some(t) = &m.truncate_after {
        extras.push(format!("truncated after {t}"));
    }
    let optimizer = match c.train.optimizer {
        Optimizer::Sgd => "SGD",
        Optimizer::Adamw => "AdamW",
    };
    let mut s = format!(
        "DeepLabV3+ {} OS{}, batch {}, {}×{}, {} classes, {}, {optimizer}",
        m.backbone.name(),
        m.output_stride,
        c.data.batch,
        c.data.size[0],
        c.data.size[1],
        m.classes,
        c.train.precision.name(),
    );
    for e in extras {
        s += ", ";
        s += &e;
    }
    s
}
