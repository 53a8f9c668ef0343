//! The `Skills` service: the manifest and files of the skills a context sees, and installation.

use super::*;
use crate::guard::audit::{Kind, Record};
use crate::work::skills::install::{self, Egress, InstallError, InstallRequest, Source};

/// The `Skills` service.
#[derive(Debug, Clone)]
pub(super) struct SkillsService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::skills_server::Skills for SkillsService {
    async fn get_skill_manifest(
        &self,
        request: Request<v1::SkillManifestRequest>,
    ) -> Result<Response<v1::SkillManifest>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::GetSkillManifest, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        let skills = crate::work::skills::manifest(
            self.shared.data_dir.root(),
            &self.shared.loaded.config.skills.directories,
            &context,
        );
        Ok(Response::new(v1::SkillManifest {
            skills: skills.iter().map(crate::server::to_wire::skill_summary).collect(),
        }))
    }

    async fn get_skill_content(
        &self,
        request: Request<v1::SkillContentRequest>,
    ) -> Result<Response<v1::SkillContent>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::GetSkillContent, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        let message = request.into_inner();
        let (path, content) = crate::work::skills::content(
            self.shared.data_dir.root(),
            &self.shared.loaded.config.skills.directories,
            &context,
            &message.skill,
            &message.path,
        )
        .map_err(|error| {
            use crate::work::skills::ContentError;
            let text = error.to_string();
            match error {
                ContentError::NoSkill(_) | ContentError::NotFound(_) => Status::not_found(text),
                ContentError::Refused { .. } => Status::permission_denied(text),
                ContentError::TooLarge { .. } => Status::failed_precondition(text),
                ContentError::Io { .. } => Status::internal(text),
            }
        })?;
        Ok(Response::new(v1::SkillContent { skill: message.skill, path, content }))
    }

    async fn install_skill(
        &self,
        request: Request<v1::InstallSkillRequest>,
    ) -> Result<Response<v1::InstallSkillResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::InstallSkill, context.as_ref(), None)?;
        let source = match (request.get_ref().source.as_str(), request.get_ref().local_folder.as_str()) {
            (url, "") => Source::Https(url.to_string()),
            ("", folder) => {
                check(&self.shared, &request, Operation::InstallSkillFromFolder, context.as_ref(), None)?;
                Source::HostFolder(folder.into())
            }
            _ => {
                return Err(Status::invalid_argument("give either source (an https:// URL) or local_folder, not both"))
            }
        };
        let live = super::live_turn(&request);
        let context = match (&caller, context) {
            (Caller::Container(_), named) => own_context(&caller, named)?,
            (_, context) => {
                context.ok_or_else(|| Status::invalid_argument("context: name the user or group to install for"))?
            }
        };
        let correlation_id = correlation_id(&request);
        let message = request.into_inner();
        let record = |kind, outcome| Record::by(kind, &caller, outcome).context(&context).correlation(&correlation_id);
        let egress = Egress {
            web: self.shared.web.clone(),
            audit: self.shared.audit.clone(),
            record: record(Kind::Egress, ""),
            trust: self.shared.tools.edge.as_ref().map(|edge| edge.authority.trust().to_path_buf()),
        };
        let skill = record(Kind::Skill, "ok");
        let install =
            InstallRequest { context, source, path: message.path, git_ref: message.git_ref, replace: message.replace };
        let root = self.shared.data_dir.root();
        let installed = if let Caller::Container(_) = caller {
            // An agent installs only by asking, for its own turn's people.
            let live = live.ok_or_else(|| {
                Status::failed_precondition("a skill is installed by asking only within a turn someone can answer")
            })?;
            let asker = crate::work::skills::asked::Asker {
                root,
                containers: &self.shared.containers,
                egress: &egress,
                approvals: &self.shared.approvals,
                taints: &self.shared.taints,
            };
            crate::work::skills::asked::install_by_asking(&asker, &live, install, skill).await?
        } else {
            install::install(root, &self.shared.containers, &egress, install, skill).await?
        };
        Ok(Response::new(v1::InstallSkillResponse {
            name: installed.name,
            description: installed.description,
            installed_to: installed.installed_to,
            commit: installed.commit,
            findings: installed.findings.iter().map(ToString::to_string).collect(),
        }))
    }
}

impl From<InstallError> for Status {
    fn from(error: InstallError) -> Status {
        let text = error.to_string();
        match error {
            InstallError::BadSource(_) | InstallError::BadFolder(_) | InstallError::BadArgument(_) => {
                Status::invalid_argument(text)
            }
            InstallError::Exists { .. } => Status::already_exists(text),
            InstallError::Withheld(_) => Status::permission_denied(text),
            InstallError::Io { .. } => Status::internal(baaaht_proto::error_chain(&error)),
            _ => Status::failed_precondition(text),
        }
    }
}
