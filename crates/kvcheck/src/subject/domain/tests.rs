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
