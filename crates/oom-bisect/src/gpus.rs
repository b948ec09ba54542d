//! Common cards for `--gpu NAME`: a ceiling by name ("behave like a 24 GiB RTX 3090").

/// A card: its name for `--gpu`, other names, what the box says, and the memory CUDA reports for
/// it, the ceiling it is. That figure is what PyTorch's out-of-memory message calls the card's
/// "total capacity" (the driver keeps the rest); `source` says where it was read. Where no such
/// report was found, the box's size stands, and `source` says so: a trial under it is a little
/// larger than the card.
pub struct Card {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub desc: &'static str,
    /// The box's size, GiB (cards are sold in binary sizes: "24 GB" is 24 GiB).
    pub box_gib: u32,
    /// What CUDA reports, GiB to two places, where a report was found.
    pub cuda_gib: Option<f64>,
    pub source: &'static str,
    /// What the host asks of the card to choose its kernels: a stream-only trial without a GPU is
    /// issued for a card of these properties (`oom_trial::card`).
    pub spec: Spec,
}

/// A card's architecture as its specification gives it (NVIDIA's tables of compute capabilities
/// and of each product): what decides which kernels, and so which buffers, a step asks for.
pub struct Spec {
    pub compute_capability: (u32, u32),
    pub multiprocessors: u32,
    /// The most shared memory one block may opt into, in bytes (227 KiB on Hopper, 163 KiB on the
    /// A100, 99 KiB on the other Ampere, Ada and consumer Blackwell cards, 96 KiB on Volta, 64
    /// KiB on Turing).
    pub max_shared_memory_per_block: u64,
}

/// What a trial's CUDA context holds, where no card of this host measured it: what the card probe
/// measured on an H100 80GB HBM3 with driver 580 (docs/fidelity.md, "Stream-only trials"). Other
/// cards and drivers differ by tens of MiB, which a stream-only trial without a GPU says.
pub const ASSUMED_CONTEXT: u64 = 518 << 20;

impl Card {
    /// The card's ceiling in bytes.
    pub fn bytes(&self) -> u64 {
        match self.cuda_gib {
            Some(g) => (g * (1u64 << 30) as f64) as u64,
            None => (self.box_gib as u64) << 30,
        }
    }
}

const BOX: &str = "the box's size: no CUDA report found";

/// The cards `--gpu` knows, smallest first.
pub const GPUS: &[Card] = &[
    card(
        "rtx3070",
        &["3070"],
        "NVIDIA GeForce RTX 3070 8 GB",
        8,
        Some(7.78),
        "github.com/akshitac8/OW-DETR/issues/46",
        Spec {
            compute_capability: (8, 6),
            multiprocessors: 46,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx4060",
        &["4060"],
        "NVIDIA GeForce RTX 4060 8 GB",
        8,
        Some(7.75),
        "github.com/ESRSchao/EdgeRegNet/issues/2",
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 24,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx3080",
        &["3080"],
        "NVIDIA GeForce RTX 3080 10 GB",
        10,
        Some(9.78),
        "github.com/zai-org/CogVideo/issues/34",
        Spec {
            compute_capability: (8, 6),
            multiprocessors: 68,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx3060",
        &["3060"],
        "NVIDIA GeForce RTX 3060 12 GB",
        12,
        None,
        BOX,
        Spec {
            compute_capability: (8, 6),
            multiprocessors: 28,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx4070",
        &["4070"],
        "NVIDIA GeForce RTX 4070 12 GB",
        12,
        None,
        BOX,
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 46,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "t4",
        &[],
        "NVIDIA T4 16 GB",
        16,
        Some(14.75),
        "github.com/hpcaitech/Open-Sora/issues/697",
        Spec {
            compute_capability: (7, 5),
            multiprocessors: 40,
            max_shared_memory_per_block: 65536,
        },
    ),
    card(
        "rtx4060ti",
        &["4060ti"],
        "NVIDIA GeForce RTX 4060 Ti 16 GB",
        16,
        None,
        BOX,
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 34,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx4080",
        &["4080"],
        "NVIDIA GeForce RTX 4080 16 GB",
        16,
        None,
        BOX,
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 76,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "v100-16",
        &["v100"],
        "NVIDIA V100 16 GB",
        16,
        None,
        BOX,
        Spec {
            compute_capability: (7, 0),
            multiprocessors: 80,
            max_shared_memory_per_block: 98304,
        },
    ),
    card(
        "l4",
        &[],
        "NVIDIA L4 24 GB",
        24,
        Some(22.03),
        "github.com/ArcInstitute/evo2/issues/190",
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 58,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx4090",
        &["4090"],
        "NVIDIA GeForce RTX 4090 24 GB",
        24,
        Some(23.64),
        "github.com/3DTopia/Phidias-Diffusion/issues/8",
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 128,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx3090",
        &["3090"],
        "NVIDIA GeForce RTX 3090 24 GB",
        24,
        Some(23.70),
        "github.com/GaoLii/DSP/issues/10",
        Spec {
            compute_capability: (8, 6),
            multiprocessors: 82,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "a10",
        &["a10g"],
        "NVIDIA A10 / A10G 24 GB",
        24,
        Some(23.70),
        "github.com/tatsu-lab/stanford_alpaca/issues/76",
        Spec {
            compute_capability: (8, 6),
            multiprocessors: 72,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "rtx5090",
        &["5090"],
        "NVIDIA GeForce RTX 5090 32 GB",
        32,
        Some(31.37),
        "github.com/Wan-Video/Wan2.1/issues/465",
        Spec {
            compute_capability: (12, 0),
            multiprocessors: 170,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "v100-32",
        &[],
        "NVIDIA V100 32 GB",
        32,
        Some(31.74),
        "github.com/haotian-liu/LLaVA/issues/812",
        Spec {
            compute_capability: (7, 0),
            multiprocessors: 80,
            max_shared_memory_per_block: 98304,
        },
    ),
    card(
        "a100-40",
        &["a100"],
        "NVIDIA A100 40 GB",
        40,
        Some(39.50),
        "github.com/TianheWu/CoSeR/issues/10",
        Spec {
            compute_capability: (8, 0),
            multiprocessors: 108,
            max_shared_memory_per_block: 166912,
        },
    ),
    card(
        "l40",
        &["l40s"],
        "NVIDIA L40 / L40S 48 GB",
        48,
        Some(44.40),
        "github.com/QwenLM/Qwen3-VL/issues/2097",
        Spec {
            compute_capability: (8, 9),
            multiprocessors: 142,
            max_shared_memory_per_block: 101376,
        },
    ),
    card(
        "a100-80",
        &[],
        "NVIDIA A100 80 GB",
        80,
        Some(79.25),
        "github.com/levihsu/OOTDiffusion/issues/235",
        Spec {
            compute_capability: (8, 0),
            multiprocessors: 108,
            max_shared_memory_per_block: 166912,
        },
    ),
    card(
        "h100",
        &["h100-80"],
        "NVIDIA H100 80 GB",
        80,
        Some(79.18),
        "this tool's card probe on an NVIDIA H100 80GB HBM3, driver 580: 85,017,493,504 B",
        Spec {
            compute_capability: (9, 0),
            multiprocessors: 132,
            max_shared_memory_per_block: 232448,
        },
    ),
    card(
        "h200",
        &[],
        "NVIDIA H200 141 GB",
        141,
        Some(139.80),
        "torch.cuda.get_device_properties on the H200 this project measures on",
        Spec {
            compute_capability: (9, 0),
            multiprocessors: 132,
            max_shared_memory_per_block: 232448,
        },
    ),
];

#[allow(clippy::too_many_arguments)]
const fn card(
    name: &'static str,
    aliases: &'static [&'static str],
    desc: &'static str,
    box_gib: u32,
    cuda_gib: Option<f64>,
    source: &'static str,
    spec: Spec,
) -> Card {
    Card {
        name,
        aliases,
        desc,
        box_gib,
        cuda_gib,
        source,
        spec,
    }
}

impl Card {
    /// The card as a stream-only trial without a GPU takes it: its specification, its memory as
    /// CUDA reports it, and an assumed context.
    pub fn props(&self) -> oom_trial::card::CardProps {
        oom_trial::card::CardProps::specified(
            self.desc,
            self.spec.compute_capability,
            self.bytes(),
            self.spec.multiprocessors,
            self.spec.max_shared_memory_per_block,
            (
                ASSUMED_CONTEXT,
                "518 MiB assumed, as on an H100 with driver 580",
            ),
        )
    }
}

/// A warning when a size given in decimal units (`24GB`) lands just under a card's memory: cards
/// are sold in binary sizes ("24 GB" is 24 GiB), so `24GB` (22.35 GiB) is not what the box says.
/// `given`: the text as typed; `bytes`: what it was read as.
pub fn decimal_warning(given: &str, bytes: u64) -> Option<String> {
    let unit = given.trim().trim_end_matches(|c: char| c.is_whitespace());
    let lower = unit.to_ascii_lowercase();
    let decimal = ["kb", "mb", "gb", "tb"].iter().any(|u| lower.ends_with(u));
    if !decimal || bytes == 0 {
        return None;
    }
    let size = GPUS.iter().map(|c| c.box_gib).find(|g| {
        let ratio = ((*g as u64) << 30) as f64 / bytes as f64;
        (1.0..1.1).contains(&ratio)
    })?;
    let cards: Vec<String> = GPUS
        .iter()
        .filter(|c| c.box_gib == size)
        .map(|c| format!("{} ({})", c.name, oom_trial::fmt_bytes(c.bytes())))
        .collect();
    Some(format!(
        "{given} is read in decimal units: {} bytes = {}. Cards are sold in binary sizes: a \
         \"{size} GB\" card has {size} GiB, and CUDA reports less of it; for a card, write --gpu \
         with its name: {}",
        bytes,
        oom_trial::fmt_bytes(bytes),
        cards.join(", ")
    ))
}

fn norm(s: &str) -> String {
    s.to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect::<String>()
        .trim_start_matches("nvidia")
        .trim_start_matches("geforce")
        .trim_start_matches('-')
        .to_string()
}

/// The named card's ceiling in bytes, and its description.
pub fn lookup(name: &str) -> Option<(u64, &'static str)> {
    by_name(name).map(|c| (c.bytes(), c.desc))
}

/// The card `--gpu` knows by this name or alias.
pub fn by_name(name: &str) -> Option<&'static Card> {
    let n = norm(name);
    GPUS.iter()
        .find(|c| c.name == n || c.aliases.contains(&n.as_str()))
}

/// The cards without bf16 arithmetic: it came with Ampere (compute capability 8.0); Volta (the
/// V100, 7.0) and Turing (the T4, 7.5) run bf16 by emulation, if at all, far slower than f16.
const NO_BF16: &[&str] = &["t4", "v100-16", "v100-32"];

impl Card {
    /// Whether the card computes in bf16 ([`NO_BF16`]).
    pub fn has_bf16(&self) -> bool {
        !NO_BF16.contains(&self.name)
    }
}

/// `--gpu help`: every card, its ceiling, and where that figure comes from.
pub fn table() -> String {
    let mut s = String::from(
        "Cards for --gpu (the ceiling is the memory CUDA reports for the card, as PyTorch's \
         out-of-memory message gives it; the CUDA context counts inside it, as on the card):\n",
    );
    for c in GPUS {
        let a = match c.aliases {
            [] => String::new(),
            a => format!(" (also {})", a.join(", ")),
        };
        s.push_str(&format!(
            "  {:<10} {:>10}  {}{a}  [{}]\n",
            c.name,
            oom_trial::fmt_bytes(c.bytes()),
            c.desc,
            c.source
        ));
    }
    s
}

/// The cards a configuration that needs `need` bytes (its CUDA context included) fits on, and
/// those it does not, by name, smallest first.
pub fn fits_on(need: u64) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut cards: Vec<&Card> = GPUS.iter().collect();
    cards.sort_by_key(|c| c.bytes());
    let (fit, not): (Vec<&Card>, Vec<&Card>) = cards.into_iter().partition(|c| need <= c.bytes());
    (
        fit.iter().map(|c| c.name).collect(),
        not.iter().map(|c| c.name).collect(),
    )
}

#[cfg(test)]
mod tests {
    /// `24GB` is a 3090 owner typing the box; `24GiB`, and decimal sizes far from a card, are not.
    #[test]
    fn decimal_sizes_near_a_card_are_questioned() {
        let w = super::decimal_warning("--memory-limit 24GB", 24_000_000_000).unwrap();
        assert!(
            w.contains("22.35 GiB") && w.contains("rtx3090 (23.70 GiB)"),
            "{w}"
        );
        assert!(super::decimal_warning("--memory-limit 24GiB", 24 << 30).is_none());
        assert!(super::decimal_warning("--memory-limit 5GB", 5_000_000_000).is_none());
    }

    #[test]
    fn names_and_what_cuda_reports() {
        // A 3090's 24 GiB box, of which CUDA reports 23.70 GiB.
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        assert!((gib(super::lookup("RTX 3090").unwrap().0) - 23.70).abs() < 0.005);
        assert_eq!(super::lookup("rtx3090"), super::lookup("3090"));
        assert!((gib(super::lookup("a100").unwrap().0) - 39.50).abs() < 0.005);
        assert!(super::lookup("voodoo2").is_none());
        assert!((gib(super::lookup("h100").unwrap().0) - 79.18).abs() < 0.005);
        // Every card's source is a report, or says there is none.
        for c in super::GPUS {
            assert!(
                c.cuda_gib.is_some() != (c.source == super::BOX),
                "{}",
                c.name
            );
            assert!(c.bytes() <= (c.box_gib as u64) << 30, "{}", c.name);
        }
    }

    #[test]
    fn bf16_arithmetic_from_ampere_on() {
        let has = |n: &str| super::by_name(n).unwrap().has_bf16();
        assert!(!has("t4") && !has("v100") && !has("v100-32"));
        assert!(has("rtx3090") && has("a100") && has("h200"));
        // Every card without it is a card `--gpu` knows.
        assert!(super::NO_BF16.iter().all(|n| super::by_name(n).is_some()));
    }

    #[test]
    fn a_need_fits_the_cards_that_hold_it() {
        let (fit, not) = super::fits_on(23u64 << 30);
        assert!(
            fit.contains(&"rtx3090") && fit.contains(&"a100-40"),
            "{fit:?}"
        );
        assert!(not.contains(&"l4") && not.contains(&"t4"), "{not:?}");
    }
}
