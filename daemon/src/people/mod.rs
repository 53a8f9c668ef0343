//! Who is who: channel identities resolved to canonical users, the groups they share, the web's
//! OIDC sign-in, and the people waiting to be admitted. It imports net/ and below.

pub mod admissions;
pub mod groups;
pub mod identities;
pub mod oidc;
