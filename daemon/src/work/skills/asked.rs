//! A skill an agent asks to install (the Worker's `install_skill`, spec §9.5): never from a
//! turn that read content from outside (`security.taint.skill_install`), and never without a
//! person's yes. It is fetched and checked ([`super::install::stage`]: nothing of it runs),
//! then its review (what it is, its scripts and their sizes, the packages its layer would
//! install, the secrets it asks for, the hosts it names, what the scan found) is asked of the
//! people of the turn's context on their channels, as a connection is
//! ([`crate::net::egress::approvals`]); `install` commits the very copy that was reviewed,
//! `decline` or no answer leaves nothing behind. For a group, only an admin's install installs.

use std::path::Path;

use super::install::{self, Egress, InstallError, InstallRequest, Installed};
use crate::base::auth::Live;
use crate::net::egress::approvals::{Approvals, Asking, Decision, Subject};
use crate::net::taint::{Taints, Way};
use crate::sandbox::container::manager::ContainerManager;

/// What an install by asking needs of the daemon.
pub struct Asker<'a> {
    pub root: &'a Path,
    pub containers: &'a ContainerManager,
    pub egress: &'a Egress,
    pub approvals: &'a Approvals,
    pub taints: &'a Taints,
}

/// Installs `request`'s skill for `live`'s turn once a person of its context approves its
/// review; audited (as `record`) however it ends.
pub async fn install_by_asking(
    asker: &Asker<'_>,
    live: &Live,
    request: InstallRequest,
    record: crate::guard::audit::Record,
) -> Result<Installed, InstallError> {
    let outcome = asked(asker, live, &request).await;
    let record = match &outcome {
        Ok((_, by)) | Err((_, Some(by))) => record.detail("answered_by", by.as_str()),
        Err((_, None)) => record,
    };
    let outcome = outcome.map(|(installed, _)| installed).map_err(|(error, _)| error);
    install::audit(asker.egress, &request, record, &outcome);
    outcome
}

/// The install and who answered its review (when someone did).
async fn asked(
    asker: &Asker<'_>,
    live: &Live,
    request: &InstallRequest,
) -> Result<(Installed, String), (InstallError, Option<String>)> {
    asker.taints.allow(live, Way::SkillInstall).map_err(|why| (InstallError::Withheld(why), None))?;
    let staged = install::stage(asker.root, asker.containers, asker.egress, request.clone())
        .await
        .map_err(|error| (error, None))?;
    let asking = Asking {
        context: request.context.clone(),
        session: live.session.clone(),
        agent: live.role,
        subject: Subject::Skill(Box::new(staged.review(asker.root))),
        asked_by: format!("install_skill {}", request.source),
    };
    match asker.approvals.ask(&asking).await {
        Ok((Decision::Install, by)) => match install::commit(asker.root, asker.containers, staged, &by).await {
            Ok(installed) => Ok((installed, by)),
            Err(error) => Err((error, Some(by))),
        },
        Ok((_, by)) => Err((InstallError::Declined { by: by.clone() }, Some(by))),
        Err(why) => Err((InstallError::NotAnswered(why.to_string()), None)),
    }
}
