//! Who is who: channel identities resolved to canonical users, the groups they share, the web's
//! OIDC sign-in, and the people waiting to be admitted. It imports net/ and below.

pub mod admissions;
pub mod groups;
pub mod identities;
pub mod oidc;

use std::sync::Arc;

use crate::base::auth::ContextKind;
use crate::base::Base;
use crate::guard::Guard;
use crate::net::Net;

#[derive(Debug, thiserror::Error)]
pub enum PeopleError {
    #[error(transparent)]
    Identities(#[from] identities::IdentityError),
    #[error(transparent)]
    Groups(#[from] groups::GroupError),
}

/// The people wing, opened.
#[derive(Debug)]
pub struct People {
    /// Channel identities → canonical users.
    pub identities: Arc<identities::Identities>,
    pub groups: Arc<groups::Groups>,
    /// Verifies the web gateway's ID tokens.
    pub oidc: Arc<oidc::Verifier>,
    /// People waiting to be admitted.
    pub admissions: Arc<admissions::Admissions>,
}

impl People {
    pub fn open(base: &Base, guard: &Guard, net: &Net) -> Result<People, PeopleError> {
        let (state_dir, redact) = (base.data_dir.state_dir(), &guard.redact);
        let identities = identities::Identities::open(&state_dir, base.data_dir.contexts_dir(ContextKind::User))?
            .redacting(redact.clone())?;
        let groups = groups::Groups::open(&state_dir)?.redacting(redact.clone());
        let admissions = admissions::Admissions::open(&state_dir).redacting(redact.clone());
        Ok(People {
            identities: Arc::new(identities),
            groups: Arc::new(groups),
            oidc: Arc::new(oidc::Verifier::new(net.web.clone())),
            admissions: Arc::new(admissions),
        })
    }
}
