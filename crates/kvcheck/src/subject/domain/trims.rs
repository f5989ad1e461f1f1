//! A domain per trim mode: the requests a cache is asked may differ
//! between its modes (a chunk longer than the room beside the sink, say,
//! refused by the contract before the read and read whole after it).

use kvmodel::Trim;

use super::Domain;

impl Domain {
    /// The domain that holds for configurations of `trim`: the
    /// `after_read` override where one is declared, else this one.
    pub fn in_mode(&self, trim: Trim) -> &Domain {
        match (trim, &self.after_read) {
            (Trim::AfterRead, Some(after)) => after,
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvmodel::{Config, Model, Op};

    use crate::subject::domain::Latest;

    /// A cache asked chunks no longer than the room before the read, and
    /// any chunk after it.
    fn both() -> Domain {
        Domain {
            oversized: false,
            after_read: Some(Box::new(Domain::default())),
            ..Domain::default()
        }
    }

    #[test]
    fn each_mode_admits_what_its_domain_declares() {
        let before = Config::dense(4);
        let after = Config {
            trim: Trim::AfterRead,
            ..Config::dense(4)
        };
        let long = Op::write(0, 6, None, None);
        let d = both();
        let at = |config: &Config| Model::new(config).unwrap();
        assert_eq!(
            d.admits(&at(&before), Latest::default(), &long)
                .unwrap_err()
                .declaration,
            "\"oversized\": false"
        );
        assert!(d.admits(&at(&after), Latest::default(), &long).is_ok());
        // Shaped into the mode's domain: clamped before the read only.
        assert_eq!(
            d.shape(&at(&before), Latest::default(), long),
            Op::write(0, 4, None, None)
        );
        assert_eq!(d.shape(&at(&after), Latest::default(), long), long);
        // An event either mode reaches is allowed.
        assert!(d.allows_event("error:chunk_too_large"));
        assert!(!Domain {
            after_read: None,
            ..both()
        }
        .allows_event("error:chunk_too_large"));
        // The declaration round-trips as the protocol's JSON.
        let parsed: Domain =
            serde_json::from_str(r#"{"oversized": false, "after_read": {}}"#).unwrap();
        assert_eq!(parsed, d);
        assert_eq!(
            d.intersect(&Domain::default()).in_mode(Trim::AfterRead),
            &Domain::default()
        );
    }
}
