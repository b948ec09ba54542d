//! The config's reading, validation and canonical form.
use super::*;

const BASE: &str = r#"
[model]
backbone = "resnet50"
output_stride = 8
classes = 21
[data]
batch = 4
size = [512, 512]
"#;

#[test]
fn reads_and_round_trips() {
    let c = Config::from_toml_str(BASE).unwrap();
    assert_eq!(c.model.effective_aspp_rates(), [12, 24, 36]);
    assert_eq!(c.steps(), 2);
    let back = Config::from_toml_str(&c.to_toml_string()).unwrap();
    assert_eq!(back, c);
    // Written out in full, it is the same workload, with nothing left to a default.
    let full = c.to_full_toml_string();
    for key in [
        "steps = 2",
        "aspp_rates = [12, 24, 36]",
        "identity = []",
        "batch_norm",
    ] {
        assert!(full.contains(key), "{key} in {full}");
    }
    let back = Config::from_toml_str(&full).unwrap();
    assert_eq!(back.canonical_key(), c.canonical_key());
}

#[test]
fn unknown_key_names_the_closest() {
    let e = Config::from_toml_str(&BASE.replace("batch = 4", "bach = 4")).unwrap_err();
    assert_eq!(e.key, "data.bach");
    assert!(e.message.contains("did you mean `data.batch`"), "{e}");
    let e = Config::from_toml_str(&format!("{BASE}\n[trian]\nsteps = 2\n")).unwrap_err();
    assert!(e.message.contains("`train`"), "{e}");
}

/// `--set batch=4` names the key it meant: the section is missing, not the key.
#[test]
fn a_set_without_its_section_names_the_full_key() {
    let mut t = toml::Table::new();
    let e = super::errors::apply_set(&mut t, "batch=4").unwrap_err();
    assert!(e.message.contains("did you mean `data.batch`"), "{e}");
    let e = super::errors::apply_set(&mut t, "outputstride=16").unwrap_err();
    assert!(e.message.contains("`model.output_stride`"), "{e}");
}

#[test]
fn invalid_knobs_name_the_key() {
    let c = Config::from_toml_str(BASE).unwrap();
    let huge = BASE.replace("classes = ", "classes = 1844674407370955161");
    let e = Config::from_toml_str(&huge).unwrap_err();
    assert_eq!(e.key, "model.classes", "{e}");
    assert!(
        e.message.contains("at line") && e.message.contains("column"),
        "{e}"
    );
    let e = c.with_overrides(&["model.output_stride=12"]).unwrap_err();
    assert_eq!(e.key, "model.output_stride");
    assert!(e.message.contains("allowed: 8, 16, 32"), "{e}");
    let e = c.with_overrides(&["data.size=[500, 512]"]).unwrap_err();
    assert_eq!(e.key, "data.size");
    assert!(e.message.contains("multiple of the output stride 8"), "{e}");
    let e = c.with_overrides(&["data.batch=0"]).unwrap_err();
    assert_eq!(e.key, "data.batch");
    let e = c.with_overrides(&["model.backbone=resnet49"]).unwrap_err();
    assert_eq!(e.key, "model.backbone");
    assert!(e.message.contains("resnet50"), "{e}");
    let e = c.with_overrides(&["train.phase=sideways"]).unwrap_err();
    assert_eq!(e.key, "train.phase");
}

#[test]
fn set_overrides_every_kind_of_value() {
    let c = Config::from_toml_str(BASE).unwrap();
    let c = c
        .with_overrides(&[
            "model.output_stride=16",
            "model.backbone=resnet101",
            "model.identity=[\"aspp.pool\"]",
            "data.size=[256, 384]",
            "train.precision=bf16",
            "model.aux_head=true",
        ])
        .unwrap();
    assert_eq!(c.model.output_stride, 16);
    assert_eq!(c.model.backbone, Backbone::Resnet101);
    assert_eq!(c.model.identity, vec!["aspp.pool".to_string()]);
    assert_eq!(c.data.size, [256, 384]);
    assert_eq!(c.train.precision, Precision::Bf16);
    assert!(c.model.aux_head);
}

#[test]
fn canonical_key_ignores_order_and_device() {
    let a = Config::from_toml_str(BASE)
        .unwrap()
        .with_overrides(&["model.identity=[\"aspp.pool\", \"decoder\"]"])
        .unwrap();
    let mut b = a.with_overrides(&["device.memory_limit=\"1GiB\""]).unwrap();
    b.model.identity.reverse();
    assert_eq!(a.canonical_key(), b.canonical_key());
    let pytorch = a
        .with_overrides(&["device.memory_model=\"pytorch\""])
        .unwrap();
    assert_eq!(a.canonical_key(), pytorch.canonical_key());
    let burn = a.with_overrides(&["device.memory_model=\"burn\""]).unwrap();
    assert_ne!(a.canonical_key(), burn.canonical_key());
}

#[test]
fn a_need_is_measured_over_every_step_with_the_state_made_first() {
    const GIB: u64 = 1 << 30;
    let c = Config::from_toml_str(BASE).unwrap();
    // A verdict far below its ceiling stands after one step, the state made first.
    assert!(c.premade_state() && c.enough_steps(1, 10 * GIB, 24 * GIB));
    let need = c.measuring_need();
    assert!(
        need.premade_state(),
        "the same stream as the verdict's trial"
    );
    assert!(!need.enough_steps(1, 10 * GIB, 24 * GIB));
    assert!(need.enough_steps(2, 10 * GIB, 24 * GIB));
    assert_ne!(need.canonical_key(), c.canonical_key());
    // Under burn's pools every step runs already, with the state made by the first update.
    let burn = c.with_overrides(&["device.memory_model=\"burn\""]).unwrap();
    assert_eq!(burn.measuring_need().canonical_key(), burn.canonical_key());
    // Without an optimizer (phase forward) there is no state to make.
    let forward = c.with_overrides(&["train.phase=\"forward\""]).unwrap();
    assert!(!forward.measuring_need().premade_state());
}
