//! Sampling on the device against transformers (`tests/text/sampling.json`, written by
//! transformers 5.17: each case's logits, setting, previous ids and the float64 softmax of the
//! processed logits): every case's distribution within 1e-6 and exactly 0 off its kept ids,
//! alone and batched with rows of other settings; draws that follow it; seeded draws that repeat;
//! greedy rows at the argmax; hostile settings refused by name.

use crate::common::devices;
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_rope_pool::model::{SamplingError, SamplingParams, SeqRng, probabilities, sample};
use serde_json::Value;

/// One case of `sampling.json`.
struct Case {
    params: SamplingParams,
    previous: Vec<u32>,
    logits: Vec<f32>,
    kept_ids: Vec<usize>,
    kept_probs: Vec<f64>,
}

fn cases() -> Vec<Case> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/text/sampling.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            params: serde_json::from_value(c["setting"].clone()).unwrap(),
            previous: floats(&c["previous_ids"])
                .iter()
                .map(|&x| x as u32)
                .collect(),
            logits: floats(&c["logits"]).iter().map(|&x| x as f32).collect(),
            kept_ids: floats(&c["kept_ids"]).iter().map(|&x| x as usize).collect(),
            kept_probs: floats(&c["kept_probs"]),
        })
        .collect()
}

/// `rows` as one `[S, V]` f32 tensor.
fn logits(rows: &[&[f32]], device: &Device) -> Tensor<2> {
    let v = rows[0].len();
    let data: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_data(TensorData::new(data, [rows.len(), v]), (device, DType::F32))
}

fn read(t: Tensor<2>) -> Vec<f32> {
    t.try_into_data()
        .unwrap()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

/// The largest error of `probs` (one row) against the case; panics where a token outside the
/// kept ids has any probability, or a kept one is off by more than 1e-6.
fn check_row(probs: &[f32], case: &Case, what: &str) -> f64 {
    let mut expected = vec![None; probs.len()];
    for (&id, &p) in case.kept_ids.iter().zip(&case.kept_probs) {
        expected[id] = Some(p);
    }
    let mut worst = 0.0f64;
    for (id, (&got, want)) in probs.iter().zip(&expected).enumerate() {
        match want {
            Some(want) => {
                let err = (f64::from(got) - want).abs();
                assert!(err <= 1e-6, "{what}: id {id}: {got} against {want}");
                worst = worst.max(err);
            }
            None => assert_eq!(got, 0.0, "{what}: id {id} is not kept but has {got}"),
        }
    }
    worst
}

#[test]
fn every_case_matches_transformers_alone_and_batched() {
    let cases = cases();
    assert_eq!(cases.len(), 12);
    for (name, device) in devices() {
        let mut worst = 0.0f64;
        for (i, case) in cases.iter().enumerate() {
            let probs = probabilities(
                logits(&[&case.logits], &device),
                std::slice::from_ref(&case.params),
                &[&case.previous],
            )
            .unwrap();
            let what = format!("{name}: case {i} ({:?})", case.params);
            worst = worst.max(check_row(&read(probs), case, &what));
        }
        // Every case of a vocabulary in one call, each row with its own settings, plus a
        // greedy row of the first case's logits.
        for vocab in [320, 1000, 4096] {
            let group: Vec<&Case> = cases.iter().filter(|c| c.logits.len() == vocab).collect();
            let mut rows: Vec<&[f32]> = group.iter().map(|c| &c.logits[..]).collect();
            let mut params: Vec<SamplingParams> = group.iter().map(|c| c.params.clone()).collect();
            let mut previous: Vec<&[u32]> = group.iter().map(|c| &c.previous[..]).collect();
            rows.push(&group[0].logits);
            params.push(SamplingParams::greedy());
            previous.push(&[]);
            let probs = read(probabilities(logits(&rows, &device), &params, &previous).unwrap());
            for (r, case) in group.iter().enumerate() {
                let what = format!("{name}: batch of vocab {vocab}, row {r}");
                let row = &probs[r * vocab..(r + 1) * vocab];
                worst = worst.max(check_row(row, case, &what));
            }
            let greedy = &probs[group.len() * vocab..];
            let argmax = host_argmax(&group[0].logits);
            for (id, &p) in greedy.iter().enumerate() {
                assert_eq!(p, f32::from(id == argmax), "{name}: greedy row, id {id}");
            }
        }
        eprintln!("{name}: largest error against transformers {worst:.3e}");
    }
}

fn host_argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

#[test]
fn ties_at_the_cut_offs_as_transformers() {
    // top-k keeps every token equal to the k-th largest; top-p keeps, of the tokens tied at
    // its cut-off, as many as transformers' ascending cumulative sum does (five equal tokens,
    // top_p 0.5: `cum` is 0.2, 0.4, 0.6, 0.8, 1 and `cum <= 0.5` goes), the highest ids first.
    let top_k = SamplingParams {
        top_k: 2,
        ..SamplingParams::default()
    };
    let top_p = SamplingParams {
        top_p: 0.5,
        ..SamplingParams::default()
    };
    let rows: [&[f32]; 2] = [&[1.0, 2.0, 0.0, 2.0, 2.0], &[0.0; 5]];
    let mut tie = [0.0f32; 5];
    tie[4] = f32::NEG_INFINITY;
    let tie_row: &[f32] = &tie;
    for (name, device) in devices() {
        let probs = read(
            probabilities(
                logits(&rows, &device),
                &[top_k.clone(), top_p.clone()],
                &[&[], &[]],
            )
            .unwrap(),
        );
        let third = 1.0 / 3.0;
        let want = [0.0, third, 0.0, third, third, 0.0, 0.0, third, third, third];
        for (i, (&got, want)) in probs.iter().zip(want).enumerate() {
            assert!(
                (got - want).abs() < 1e-6,
                "{name}: {i}: {got} against {want}"
            );
            assert_eq!(got == 0.0, want == 0.0, "{name}: {i}");
        }
        // Four equal tokens after one of -inf: `cum` 0, 0.25, 0.5, 0.75, 1; the last two kept.
        let probs = read(
            probabilities(
                logits(&[tie_row], &device),
                std::slice::from_ref(&top_p),
                &[&[]],
            )
            .unwrap(),
        );
        assert_eq!(probs, [0.0, 0.0, 0.5, 0.5, 0.0], "{name}");
    }
}

/// Draws `n` tokens of one case, `rows` at a time (the same logits in every row), with
/// uniforms from one seeded stream.
fn draws(case: &Case, n: usize, rows: usize, seed: u64, device: &Device) -> Vec<usize> {
    let mut rng = SeqRng::new(Some(seed));
    let batch = logits(&vec![&case.logits[..]; rows], device);
    let params = vec![case.params.clone(); rows];
    let previous = vec![&case.previous[..]; rows];
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let uniforms: Vec<f32> = (0..rows).map(|_| rng.uniform()).collect();
        let ids = sample(batch.clone(), &params, &previous, &uniforms).unwrap();
        out.extend(ids.into_iter().map(|id| id as usize));
    }
    out
}

/// Draws `n` tokens of case `i` on every device: each token's frequency within 5 standard
/// deviations (and 3 draws) of its probability, and no token outside the kept ids.
fn draws_follow(i: usize, n: usize, rows: usize) {
    let cases = cases();
    let case = &cases[i];
    let mut p = vec![0.0f64; case.logits.len()];
    for (&id, &q) in case.kept_ids.iter().zip(&case.kept_probs) {
        p[id] = q;
    }
    for (name, device) in devices() {
        let mut counts = vec![0usize; case.logits.len()];
        for id in draws(case, n, rows, 7 + i as u64, &device) {
            counts[id] += 1;
        }
        let mut chi2 = 0.0;
        for (id, (&c, &q)) in counts.iter().zip(&p).enumerate() {
            let f = c as f64 / n as f64;
            assert!(
                q > 0.0 || c == 0,
                "{name}: case {i}: id {id} is not kept, drawn {c}"
            );
            let bound = 5.0 * (q * (1.0 - q) / n as f64).sqrt() + 3.0 / n as f64;
            assert!(
                (f - q).abs() <= bound,
                "{name}: case {i}: id {id} drawn {f}, probability {q}"
            );
            if q > 0.0 {
                chi2 += (c as f64 - q * n as f64).powi(2) / (q * n as f64);
            }
        }
        eprintln!(
            "{name}: case {i}: {n} draws, chi-square {chi2:.1} over {} kept ids",
            case.kept_ids.len()
        );
    }
}

#[test]
fn draws_follow_the_distribution_at_temperature_1() {
    draws_follow(0, 20_000, 2_000);
}

#[test]
fn draws_follow_the_distribution_after_min_p_top_k_top_p() {
    draws_follow(6, 5_000, 2_500);
    draws_follow(7, 1_000, 500);
}

#[test]
fn seeded_draws_repeat_and_greedy_rows_take_the_argmax() {
    let cases = cases();
    let case = &cases[0];
    let v = case.logits.len();
    let sampled = SamplingParams {
        temperature: 0.9,
        top_k: 50,
        seed: Some(11),
        ..SamplingParams::default()
    };
    let penalized_greedy = SamplingParams {
        repetition_penalty: 1e6,
        ..SamplingParams::greedy()
    };
    let argmax = host_argmax(&case.logits);
    // The argmax again after its logit is divided by a large penalty: the runner-up.
    let mut penalized = case.logits.clone();
    penalized[argmax] /= 1e6;
    let runner_up = host_argmax(&penalized);
    assert_ne!(argmax, runner_up);
    let params = [
        sampled.clone(),
        SamplingParams::greedy(),
        sampled.clone(),
        penalized_greedy,
    ];
    let argmax_prev = [argmax as u32];
    let previous: [&[u32]; 4] = [&[], &[], &[], &argmax_prev];
    let rows = [&case.logits[..]; 4];
    for (name, device) in devices() {
        let run = |seed: u64| {
            let mut rngs: Vec<SeqRng> = (0..4u64).map(|r| SeqRng::new(Some(seed + r))).collect();
            (0..8)
                .map(|_| {
                    let uniforms: Vec<f32> = rngs.iter_mut().map(SeqRng::uniform).collect();
                    let batch = logits(&rows, &device);
                    sample(batch, &params, &previous, &uniforms).unwrap()
                })
                .collect::<Vec<_>>()
        };
        let first = run(11);
        assert_eq!(first, run(11), "{name}: the same seeds drew other ids");
        assert_ne!(first, run(12), "{name}: other seeds drew the same ids");
        for ids in &first {
            assert_eq!(ids[1] as usize, argmax, "{name}: greedy row");
            assert_eq!(ids[3] as usize, runner_up, "{name}: penalized greedy row");
            assert!((ids[0] as usize) < v && (ids[2] as usize) < v);
        }
        // Rows 0 and 2 have the same settings but their own streams.
        assert!(first.iter().any(|ids| ids[0] != ids[2]), "{name}");
        // All-greedy batches read the argmax alone.
        let greedy = sample(
            logits(&rows[..2], &device),
            &[SamplingParams::greedy(), SamplingParams::greedy()],
            &[&[], &[]],
            &[0.5, 0.25],
        )
        .unwrap();
        assert_eq!(greedy, [argmax as u32; 2], "{name}");
    }
    let mut a = SeqRng::new(Some(5));
    let mut b = SeqRng::new(Some(5));
    for _ in 0..100 {
        let u = a.uniform();
        assert!((0.0..1.0).contains(&u));
        assert_eq!(u, b.uniform());
    }
}

#[test]
fn hostile_settings_are_refused_by_name() {
    let with = |f: fn(&mut SamplingParams)| {
        let mut p = SamplingParams::default();
        f(&mut p);
        p
    };
    let hostile = [
        (with(|p| p.top_p = 0.0), "`top_p` is 0"),
        (with(|p| p.top_p = 1.5), "`top_p` is 1.5"),
        (with(|p| p.top_p = f32::NAN), "`top_p` is NaN"),
        (with(|p| p.temperature = -1.0), "`temperature` is -1"),
        (with(|p| p.temperature = f32::NAN), "`temperature` is NaN"),
        (
            with(|p| p.temperature = f32::INFINITY),
            "`temperature` is inf",
        ),
        (with(|p| p.min_p = 2.0), "`min_p` is 2"),
        (with(|p| p.min_p = -0.5), "`min_p` is -0.5"),
        (
            with(|p| p.repetition_penalty = 0.0),
            "`repetition_penalty` is 0",
        ),
        (
            with(|p| p.repetition_penalty = f32::NAN),
            "`repetition_penalty` is NaN",
        ),
    ];
    let device = Device::flex();
    let row: &[f32] = &[0.5, 1.0, -1.0];
    for (params, message) in &hostile {
        let err = params.validate().unwrap_err().to_string();
        assert!(err.contains(message), "{err}");
        let batch = [SamplingParams::default(), params.clone()];
        let err = probabilities(logits(&[row, row], &device), &batch, &[&[], &[]]).unwrap_err();
        assert!(
            err.to_string().starts_with("row 1: ") && err.to_string().contains(message),
            "{err}"
        );
        let err = sample(logits(&[row], &device), &batch[1..], &[&[]], &[0.5]).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }
    for good in [
        SamplingParams::default(),
        SamplingParams::greedy(),
        with(|p| p.top_p = 1e-3),
        with(|p| p.min_p = 1.0),
    ] {
        good.validate().unwrap();
    }
    let one = [SamplingParams::default()];
    let two = [SamplingParams::default(), SamplingParams::default()];
    let err = probabilities(logits(&[row], &device), &two, &[&[]]).unwrap_err();
    assert_eq!(
        err,
        SamplingError::Rows {
            what: "params",
            got: 2,
            rows: 1
        }
    );
    assert_eq!(err.to_string(), "params: 2 for 1 rows of logits");
    let err = probabilities(logits(&[row], &device), &one, &[&[], &[]]).unwrap_err();
    assert!(
        err.to_string().starts_with("previous: 2 for 1 rows"),
        "{err}"
    );
    let err = sample(logits(&[row], &device), &one, &[&[]], &[]).unwrap_err();
    assert!(
        err.to_string().starts_with("uniforms: 0 for 1 rows"),
        "{err}"
    );
    let err = sample(logits(&[row], &device), &one, &[&[]], &[1.0]).unwrap_err();
    assert!(err.to_string().contains("`uniform` is 1"), "{err}");
    let penalty = [with(|p| p.repetition_penalty = 1.2)];
    let err = probabilities(logits(&[row], &device), &penalty, &[&[0, 3]]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "row 0: previous token id 3 is outside the vocabulary of 3"
    );
    // JSON: every field optional, unknown ones refused.
    let p: SamplingParams = serde_json::from_str("{}").unwrap();
    assert_eq!(p, SamplingParams::default());
    let p: SamplingParams = serde_json::from_str(r#"{"temperature": 0, "seed": 3}"#).unwrap();
    assert!(p.is_greedy() && p.seed == Some(3));
    let err = serde_json::from_str::<SamplingParams>(r#"{"top_q": 1}"#).unwrap_err();
    assert!(err.to_string().contains("top_q"), "{err}");
}
