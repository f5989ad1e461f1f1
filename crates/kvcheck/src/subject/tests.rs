use super::*;

#[test]
fn cache_paths_parse_name_and_open() {
    let generic = SubjectSpec::parse("cache:generic").unwrap();
    assert_eq!(generic, SubjectSpec::CachePath(kvcache::Path::Generic));
    assert_ne!(generic, SubjectSpec::Cache);
    assert_eq!(generic.name(&Config::dense(4)), "dense:generic");
    assert_eq!(
        SubjectSpec::parse("cache:in-place")
            .unwrap()
            .name(&Config::packed(4)),
        "packed:in-place"
    );
    let err = SubjectSpec::parse("cache:gpu").unwrap_err().to_string();
    assert!(err.contains("\"gpu\""), "{err}");
    assert!(generic.open(&Config::dense(4), &Device::Cpu).is_ok());
}

/// Every subject kind but a factory: the name a report prints parses
/// back to the same subject, on a dense and a packed configuration.
#[test]
fn every_report_name_parses_back_to_its_subject() {
    let mut subjects = vec![
        SubjectSpec::Cache,
        SubjectSpec::Ring,
        SubjectSpec::CachePath(kvcache::Path::Generic),
        SubjectSpec::CachePath(kvcache::Path::InPlace),
        SubjectSpec::Reference,
        SubjectSpec::Exec(Arc::new(
            ExecSubject::new("python3 adapters/reference_subject.py").unwrap(),
        )),
    ];
    subjects.extend(Fault::ALL.map(SubjectSpec::Fault));
    for fault in CacheFault::ALL {
        for base in [FaultBase::Shipped, FaultBase::Generic, FaultBase::Ring] {
            if base.holds(fault.variant()) {
                subjects.push(SubjectSpec::cache_fault(fault, base));
            }
        }
    }
    for subject in &subjects {
        for config in [Config::dense(4), Config::packed(4)] {
            let name = subject.name(&config);
            let parsed = SubjectSpec::parse(&name)
                .unwrap_or_else(|e| panic!("report name {name:?} does not parse: {e}"));
            assert_eq!(parsed.name(&config), name, "{name:?}");
            if !matches!(subject, SubjectSpec::Exec(_)) {
                assert_eq!(&parsed, subject, "{name:?}");
            }
        }
    }
}
