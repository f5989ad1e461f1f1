use super::*;
use kvmodel::Config;

fn model_after(config: &Config, ops: &[Op]) -> (Model, Latest) {
    let mut model = Model::new(config).unwrap();
    let mut latest = Latest::default();
    for (i, op) in ops.iter().enumerate() {
        let before = model.global_end();
        let ok = model.apply(i as u64, op).is_ok();
        latest.follow(before, op, ok);
    }
    (model, latest)
}

fn pipeline_with(chunks: Chunks) -> Domain {
    Domain {
        chunks,
        ..Domain::pipeline()
    }
}

#[test]
fn the_whole_domain_admits_everything() {
    let (model, latest) = model_after(&Config::dense(4), &[]);
    for op in [
        Op::write(3, 1, None, None),
        Op::write(-1, 1, None, None),
        Op::write(0, 0, None, None),
        Op::Evict { tokens: -2 },
    ] {
        assert!(Domain::default().admits(&model, latest, &op).is_ok());
    }
    assert!(Domain::default().is_whole());
}

#[test]
fn a_pipeline_domain_names_the_declaration_that_excludes() {
    let config = Config {
        sink: 1,
        ..Config::dense(6)
    };
    let d = pipeline_with(Chunks::Lengths(vec![2]));
    let (model, latest) = model_after(&config, &[]);
    let why = |op: Op| d.admits(&model, latest, &op).unwrap_err().declaration;
    assert_eq!(
        why(Op::write(0, 0, None, None)),
        "\"probes\": \"after_append\""
    );
    assert_eq!(why(Op::write(1, 2, None, None)), "\"gaps\": false");
    assert_eq!(why(Op::write(0, 6, None, None)), "\"oversized\": false");
    assert_eq!(why(Op::write(0, 3, None, None)), "\"chunks\"");
    assert_eq!(why(Op::write(0, -1, None, None)), "\"malformed\": false");
    assert!(d
        .admits(&model, latest, &Op::write(0, 2, None, None))
        .is_ok());
    let (model, latest) = model_after(
        &config,
        &[Op::write(0, 2, None, None), Op::write(2, 2, None, None)],
    );
    assert_eq!(latest, Latest(Some((2, 2))));
    assert!(d
        .admits(&model, latest, &Op::write(2, 2, None, None))
        .is_ok());
    assert!(d
        .admits(&model, latest, &Op::write(4, 0, None, None))
        .is_ok());
    let e = d
        .admits(&model, latest, &Op::write(0, 2, None, None))
        .unwrap_err();
    assert_eq!(e.declaration, "\"rewrites\": \"latest\"");
    assert!(e.to_string().contains("write 0+2"), "{e}");
}

#[test]
fn scene_cuts_pin_the_latest_chunk_and_drop_what_lies_before_it() {
    let config = Config {
        sink: 1,
        global_sink: 1,
        ..Config::dense(8)
    };
    let d = Domain::pipeline();
    let first = [Op::write(0, 2, None, None)];
    let (model, latest) = model_after(&config, &first);
    assert!(
        d.admits(&model, latest, &Op::Pin { tokens: 2 }).is_err(),
        "the first chunk is no cut"
    );
    let ops = [
        first[0],
        Op::write(2, 2, None, None),
        Op::write(4, 2, None, None),
    ];
    let (model, latest) = model_after(&config, &ops);
    assert!(d.admits(&model, latest, &Op::Pin { tokens: 2 }).is_ok());
    assert!(d.admits(&model, latest, &Op::Pin { tokens: 1 }).is_err());
    // Evictable before [4, 6): 1, 2, 3.
    assert!(d.admits(&model, latest, &Op::Evict { tokens: 3 }).is_ok());
    assert_eq!(
        d.shape(&model, latest, Op::Evict { tokens: 1 }),
        Op::Evict { tokens: 3 }
    );
    assert_eq!(
        d.shape(&model, latest, Op::Pin { tokens: 7 }),
        Op::Pin { tokens: 2 }
    );
    let no_shot = Config {
        global_sink: 0,
        ..config
    };
    let (model, latest) = model_after(&no_shot, &ops);
    assert!(d.admits(&model, latest, &Op::Pin { tokens: 2 }).is_err());
}

#[test]
fn shaping_moves_draws_inside() {
    let config = Config {
        sink: 1,
        ..Config::dense(8)
    };
    let d = pipeline_with(Chunks::Multiple(3));
    let (model, latest) = model_after(&config, &[]);
    assert_eq!(
        d.shape(&model, latest, Op::write(5, 2, None, None)),
        Op::write(0, 3, None, None)
    );
    assert_eq!(
        d.shape(&model, latest, Op::write(0, 9, None, None)),
        Op::write(0, 6, None, None)
    );
    let (model, latest) = model_after(&config, &[Op::write(0, 3, None, None)]);
    assert_eq!(
        d.shape(&model, latest, Op::write(1, 1, None, None)),
        Op::write(0, 3, None, None)
    );
    for op in [
        Op::write(-1, 2, None, None),
        Op::write(1, 0, None, None),
        Op::write(7, 4, None, None),
    ] {
        let shaped = d.shape(&model, latest, op);
        assert!(
            d.admits(&model, latest, &shaped).is_ok(),
            "{op} -> {shaped}"
        );
    }
}

#[test]
fn declarations_parse_with_defaults_and_refuse_unknown_fields() {
    let d: Domain = serde_json::from_str(
        r#"{"rewrites": "latest", "chunks": {"lengths": [3]}, "gaps": false}"#,
    )
    .unwrap();
    assert_eq!(d.rewrites, Rewrites::Latest);
    assert_eq!(d.chunks, Chunks::Lengths(vec![3]));
    assert!(!d.gaps && d.oversized && d.malformed);
    let d: Domain =
        serde_json::from_str(r#"{"chunks": {"multiple": 2}, "pin": "scene_cut"}"#).unwrap();
    assert_eq!((d.chunks, d.pin), (Chunks::Multiple(2), Moves::SceneCut));
    assert!(serde_json::from_str::<Domain>(r#"{"gap": false}"#).is_err());
    assert!(serde_json::from_str::<Domain>(r#"{"rewrites": "some"}"#).is_err());
}

#[test]
fn intersections_take_the_narrower_field() {
    let a = Domain {
        chunks: Chunks::Lengths(vec![2, 3, 4]),
        gaps: false,
        ..Domain::default()
    };
    let b = Domain {
        chunks: Chunks::Multiple(2),
        rewrites: Rewrites::Latest,
        ..Domain::default()
    };
    let both = a.intersect(&b);
    assert_eq!(both.chunks, Chunks::Lengths(vec![2, 4]));
    assert_eq!(both.rewrites, Rewrites::Latest);
    assert!(!both.gaps);
    assert_eq!(
        Domain::default().intersect(&Domain::default()),
        Domain::default()
    );
}

#[test]
fn configs_limits_and_chunks_that_never_fit_close_configurations() {
    let fixed = Domain {
        chunks: Chunks::Lengths(vec![3]),
        oversized: false,
        ..Domain::default()
    };
    let small = Config {
        sink: 1,
        ..Config::dense(3)
    };
    // C − S = 2 holds no chunk of 3: no write would be admitted there.
    assert_eq!(
        fixed.opens(&small).unwrap_err(),
        Unopened::NoChunkFits { room: 2 }
    );
    assert!(fixed.opens(&Config::dense(3)).is_ok());
    // With oversized writes admitted, the chunk is asked and refused.
    assert!(Domain {
        oversized: true,
        ..fixed.clone()
    }
    .opens(&small)
    .is_ok());
    let limits = Domain {
        configs: Box::new(ConfigLimits {
            min_room: Some(3),
            min_window: Some(2),
            batch: Some(vec![1]),
            heads: None,
            head_dim: Some(vec![1, 2]),
            ..ConfigLimits::default()
        }),
        ..Domain::default()
    };
    assert!(limits.opens(&Config::dense(3)).is_ok());
    assert!(limits
        .opens(&small)
        .unwrap_err()
        .to_string()
        .contains("min_room"));
    let narrow = Config {
        window: Some(2),
        sink: 1,
        ..Config::dense(6)
    };
    assert!(limits
        .opens(&narrow)
        .unwrap_err()
        .to_string()
        .contains("min_window"));
    for (config, field) in [
        (
            Config {
                batch: 2,
                ..Config::dense(4)
            },
            "batch 2",
        ),
        (
            Config {
                head_dim: 4,
                ..Config::dense(4)
            },
            "head_dim 4",
        ),
    ] {
        assert!(limits
            .opens(&config)
            .unwrap_err()
            .to_string()
            .starts_with(field));
    }
    let parsed: Domain =
        serde_json::from_str(r#"{"configs": {"min_room": 3, "batch": [1]}, "rewinds": "held"}"#)
            .unwrap();
    assert_eq!(parsed.configs.min_room, Some(3));
    assert_eq!(parsed.rewinds, Rewinds::Held);
    assert!(serde_json::from_str::<Domain>(r#"{"configs": {"rooms": 3}}"#).is_err());
    let both = limits.intersect(&Domain {
        configs: Box::new(ConfigLimits {
            min_room: Some(4),
            head_dim: Some(vec![2, 3]),
            ..ConfigLimits::default()
        }),
        ..Domain::default()
    });
    assert_eq!(both.configs.min_room, Some(4));
    assert_eq!(both.configs.head_dim, Some(vec![2]));
}

#[test]
fn held_rewinds_and_counts_ask_only_what_the_cache_holds() {
    let d = Domain {
        rewinds: Rewinds::Held,
        evict: Moves::Held,
        pin: Moves::Held,
        ..Domain::default()
    };
    let config = Config {
        sink: 1,
        ..Config::dense(4)
    };
    let (empty, latest) = model_after(&config, &[]);
    // An evict on an empty cache, an unpin, a rewind past the end.
    for op in [
        Op::Evict { tokens: 1 },
        Op::Evict { tokens: 0 },
        Op::Pin { tokens: 0 },
        Op::Rewind { to: 1 },
    ] {
        assert!(d.admits(&empty, latest, &op).is_err(), "{op}");
        let shaped = d.shape(&empty, latest, op);
        assert!(
            d.admits(&empty, latest, &shaped).is_ok(),
            "{op} -> {shaped}"
        );
    }
    assert!(d.admits(&empty, latest, &Op::Rewind { to: 0 }).is_ok());
    // 0..6 written into four slots with one sink: 1 and 2 were evicted.
    let (model, latest) = model_after(
        &config,
        &[Op::write(0, 4, None, None), Op::write(4, 2, None, None)],
    );
    assert!(d.admits(&model, latest, &Op::Rewind { to: 1 }).is_ok());
    assert_eq!(
        d.admits(&model, latest, &Op::Rewind { to: 5 })
            .unwrap_err()
            .declaration,
        "\"rewinds\": \"held\""
    );
    assert_eq!(
        d.shape(&model, latest, Op::Rewind { to: 5 }),
        Op::Rewind { to: 1 }
    );
    assert!(d.admits(&model, latest, &Op::Evict { tokens: 3 }).is_ok());
    assert!(d.admits(&model, latest, &Op::Evict { tokens: 4 }).is_err());
    assert_eq!(
        d.shape(&model, latest, Op::Evict { tokens: 9 }),
        Op::Evict { tokens: 3 }
    );
    assert!(d.admits(&model, latest, &Op::Pin { tokens: 2 }).is_ok());
    assert!(Domain::default().allows_event("rewind_into_evicted"));
    assert!(!d.allows_event("rewind_into_evicted"));
}

#[test]
fn suggestions_are_the_widest_declaration_that_leaves_the_answer_out() {
    let config = Config {
        sink: 1,
        ..Config::dense(6)
    };
    let ops = [Op::write(0, 2, None, None), Op::write(2, 2, None, None)];
    let (model, latest) = model_after(&config, &ops);
    let suggest = |op: Op| Domain::suggest(&model, latest, &op);
    // An older chunk's rewrite is left out by "latest"; the latest
    // chunk's only by "none".
    assert_eq!(
        suggest(Op::write(0, 2, None, None)),
        Some("\"rewrites\": \"latest\"")
    );
    assert_eq!(
        suggest(Op::write(2, 2, None, None)),
        Some("\"rewrites\": \"none\"")
    );
    assert_eq!(
        suggest(Op::write(5, 1, None, None)),
        Some("\"gaps\": false")
    );
    assert_eq!(suggest(Op::write(4, 1, None, None)), None);
    assert_eq!(suggest(Op::Rewind { to: 5 }), Some("\"rewinds\": \"held\""));
    let (empty, latest) = model_after(&config, &[]);
    assert_eq!(
        Domain::suggest(&empty, latest, &Op::Evict { tokens: 1 }),
        Some("\"evict\": \"held\"")
    );
    assert_eq!(
        narrowest("\"rewrites\": \"latest\"", "\"rewrites\": \"none\""),
        "\"rewrites\": \"none\""
    );
    assert_eq!(
        narrowest("\"rewrites\": \"none\"", "\"rewrites\": \"latest\""),
        "\"rewrites\": \"none\""
    );
    assert_eq!(declared_field("\"rewrites\": \"none\""), "\"rewrites\"");
    // Every suggestion is a declaration a subject can write as it reads.
    for (declaration, _) in SUGGESTIONS {
        let parsed: Domain = serde_json::from_str(&format!("{{{declaration}}}")).unwrap();
        assert!(!parsed.is_whole(), "{declaration}");
    }
}

#[test]
fn sink_and_growth_limits_open_only_what_they_declare() {
    let grows = Domain {
        configs: Box::new(ConfigLimits {
            max_sink: Some(0),
            growth: Some(true),
            ..ConfigLimits::default()
        }),
        ..Domain::default()
    };
    let growing = Config {
        growth: true,
        ..Config::dense(4)
    };
    assert!(grows.opens(&growing).is_ok());
    assert_eq!(
        grows.opens(&Config::dense(4)).unwrap_err(),
        Unopened::Growth {
            growth: false,
            declared: true
        }
    );
    let sunk = Config {
        sink: 1,
        ..growing.clone()
    };
    assert_eq!(
        grows.opens(&sunk).unwrap_err().to_string(),
        "S = 1, above \"configs\": {\"max_sink\": 0}"
    );
    // Events only a sink or eviction by a write reaches are not required.
    assert!(!grows.allows_event("eviction_beside_sink"));
    assert!(!grows.allows_event("error:chunk_too_large"));
    assert!(grows.allows_event("growth"));
    let never = Domain {
        configs: Box::new(ConfigLimits {
            growth: Some(false),
            ..ConfigLimits::default()
        }),
        ..Domain::default()
    };
    assert!(!never.allows_event("growth"));
    assert!(never.opens(&growing).is_err());
    // Two declarations that disagree on growth open nothing together.
    let both = grows.intersect(&never);
    assert!(both.opens(&growing).is_err() && both.opens(&Config::dense(4)).is_err());
    assert_eq!(
        grows.intersect(&Domain::default()).configs.max_sink,
        Some(0)
    );
    let parsed: Domain =
        serde_json::from_str(r#"{"configs": {"max_sink": 0, "growth": true}}"#).unwrap();
    assert_eq!(parsed, grows);
}
