//! The `Gateways` service (what a gateway asks for the user it names) and the `Admin` service
//! (users, identities, groups, usage, configuration, containers, gateways). Who may call what
//! is `auth::authorize`'s; these handlers convert and call `identities`, `groups`, `budgets`
//! and `gateways`.

use std::sync::Arc;

use baaaht_proto::v1;
use tonic::{Request, Response, Status};

use super::Shared;
use super::{check, context_of, to_wire};
use crate::base::auth::{Caller, Context, EndUser, Operation, Target};
use crate::guard::audit::{Kind, Record};
use crate::people::groups::{GroupError, GroupRecord};
use crate::people::identities::{IdentityError, UserView};
use crate::work::gateways::{GatewayError, GatewayRecord};

impl From<IdentityError> for Status {
    fn from(error: IdentityError) -> Status {
        let text = error.to_string();
        match error {
            IdentityError::BadIdentity(_) | IdentityError::BadName | IdentityError::NameTaken(_) => {
                Status::invalid_argument(text)
            }
            IdentityError::UnknownIdentity(_) | IdentityError::UnknownUser(_) => Status::not_found(text),
            IdentityError::AlreadyLinked(..) => Status::already_exists(text),
            IdentityError::NotLinked(_) | IdentityError::BadCode => Status::failed_precondition(text),
            IdentityError::TooMany(_) => Status::resource_exhausted(text),
            // What could not be written stays in the operator's log; its caller (anyone whose
            // first message it was) reads a sentence.
            other => {
                tracing::error!(error = %baaaht_proto::error_chain(&other), "cannot record who is who");
                if crate::base::state::is_disk_full(&other) {
                    Status::resource_exhausted(crate::base::state::DISK_FULL)
                } else {
                    Status::internal(crate::base::auth::NOT_RECORDED)
                }
            }
        }
    }
}

impl From<GroupError> for Status {
    fn from(error: GroupError) -> Status {
        let text = error.to_string();
        match error {
            GroupError::BadId(_) => Status::invalid_argument(text),
            GroupError::Exists(_) => Status::already_exists(text),
            GroupError::NotFound(_) => Status::not_found(text),
            GroupError::Deactivated(..) => Status::failed_precondition(text),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

impl From<GatewayError> for Status {
    fn from(error: GatewayError) -> Status {
        let text = error.to_string();
        match error {
            GatewayError::BadName(_) | GatewayError::Invalid(_) => Status::invalid_argument(text),
            GatewayError::Exists(_) => Status::already_exists(text),
            GatewayError::NotFound(_) => Status::not_found(text),
            GatewayError::NotForIt(_) => Status::permission_denied(text),
            GatewayError::MissingSecret { .. } => Status::failed_precondition(text),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

fn profile(shared: &Shared, user: UserView) -> v1::UserProfile {
    let path = shared.data_dir.context_dir(&Context::user(&user.id)).join("USER.md");
    let preferred = std::fs::read_to_string(path).ok().and_then(|text| crate::store::profile::preferred_channel(&text));
    v1::UserProfile {
        preferred_channel: preferred.unwrap_or_default(),
        admin: shared.loaded.config.system.admin_users.contains(&user.id),
        groups: shared.groups.of_member(&user.id),
        id: user.id,
        name: user.name,
        identities: user.identities,
        created: user.created,
    }
}

fn group_info(id: String, record: GroupRecord) -> v1::GroupInfo {
    v1::GroupInfo {
        id,
        name: record.name,
        members: record.members,
        active: record.active,
        deactivated_reason: record.deactivated_reason,
        origin: record.origin,
        created: record.created,
    }
}

fn gateway_info(shared: &Shared, record: &GatewayRecord) -> v1::GatewayInfo {
    let state = shared.supervisors.state(&record.name).map(|state| state.describe()).unwrap_or_default();
    v1::GatewayInfo {
        name: record.name.clone(),
        kind: record.kind.as_str().into(),
        namespace: record.kind.namespace(),
        socket: shared
            .gateways
            .socket_folder(&record.name)
            .join(crate::sandbox::sockets::GATEWAY_SOCKET_NAME)
            .display()
            .to_string(),
        created: record.created.clone(),
        mode: record.mode.as_str().into(),
        args: record.args.clone(),
        state: state.0.into(),
        message: state.1,
    }
}

/// The end user a gateway's call names (authorization made sure there is one).
fn end_user(caller: &Caller) -> Result<&EndUser, Status> {
    match caller {
        Caller::Gateway(call) => call.user.as_ref().ok_or_else(|| Status::unauthenticated("no end user")),
        _ => Err(Status::permission_denied("this is for gateways, for the users they name")),
    }
}

/// A member or user named by id or by channel identity: the canonical id when the identity is
/// known, else the name as given (host user names are members too).
fn member_id(shared: &Shared, named: &str) -> Result<String, Status> {
    if let Some(user) = shared.identities.lookup(named) {
        return Ok(user);
    }
    if crate::people::identities::is_channel_identity(named) {
        return Err(IdentityError::UnknownIdentity(named.to_string()).into());
    }
    super::valid_id(named, "member")?;
    Ok(named.to_string())
}

/// The `Gateways` service.
#[derive(Debug, Clone)]
pub(super) struct GatewaysService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::gateways_server::Gateways for GatewaysService {
    async fn who_am_i(&self, request: Request<v1::WhoAmIRequest>) -> Result<Response<v1::UserProfile>, Status> {
        let caller = check(&self.shared, &request, Operation::WhoAmI, None, None)?;
        let user = end_user(&caller)?;
        let view = self.shared.identities.user(&user.id).ok_or_else(|| IdentityError::UnknownUser(user.id.clone()))?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn update_profile(&self, request: Request<v1::ProfileUpdate>) -> Result<Response<v1::UserProfile>, Status> {
        let caller = check(&self.shared, &request, Operation::UpdateProfile, None, None)?;
        let user = end_user(&caller)?;
        let update = request.get_ref();
        let channel = update.preferred_channel.as_deref().map(|channel| channel.trim().to_ascii_lowercase());
        if let Some(channel) = channel.as_deref().filter(|channel| !crate::store::profile::is_valid_channel(channel)) {
            return Err(Status::invalid_argument(format!(
                "preferred channel `{}`: choose web, tui, slack, slack/dm, telegram, matrix, email, none, or nothing for \
                 the channel last used",
                channel.chars().take(80).collect::<String>()
            )));
        }
        if let Some(name) = &update.name {
            self.shared.identities.rename(&user.id, name)?;
        }
        if let Some(channel) = channel {
            let path = self.shared.data_dir.context_dir(&Context::user(&user.id)).join("USER.md");
            crate::store::profile::set_preferred_channel(&path, &channel)
                .map_err(|error| Status::internal(baaaht_proto::error_chain(&error)))?;
        }
        let view = self.shared.identities.user(&user.id).ok_or_else(|| IdentityError::UnknownUser(user.id.clone()))?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn start_link(&self, request: Request<v1::StartLinkRequest>) -> Result<Response<v1::LinkCode>, Status> {
        let caller = check(&self.shared, &request, Operation::StartLink, None, None)?;
        let code = self.shared.identities.start_link(&end_user(&caller)?.id)?;
        let valid_seconds = crate::people::identities::LINK_CODE_VALID.as_secs() as u32;
        Ok(Response::new(v1::LinkCode { code, valid_seconds }))
    }

    async fn confirm_link(
        &self,
        request: Request<v1::ConfirmLinkRequest>,
    ) -> Result<Response<v1::UserProfile>, Status> {
        let caller = check(&self.shared, &request, Operation::ConfirmLink, None, None)?;
        let user = end_user(&caller)?;
        let view = self.shared.identities.confirm_link(&request.get_ref().code, &user.identity)?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn get_gateway_secrets(
        &self,
        request: Request<v1::GatewaySecretsRequest>,
    ) -> Result<Response<v1::GatewaySecrets>, Status> {
        let caller = check(&self.shared, &request, Operation::GetGatewaySecrets, None, None)?;
        let Caller::Gateway(call) = &caller else {
            return Err(Status::permission_denied("GetGatewaySecrets is for gateways"));
        };
        let record = self
            .shared
            .gateways
            .get(&call.gateway)
            .ok_or_else(|| Status::permission_denied("this gateway is no longer registered"))?;
        let secrets = crate::work::gateways::credentials(&record, &self.shared.secrets, &self.shared.audit, &caller)?;
        Ok(Response::new(v1::GatewaySecrets { secrets }))
    }

    async fn ensure_channel_group(
        &self,
        request: Request<v1::EnsureChannelGroupRequest>,
    ) -> Result<Response<v1::GroupInfo>, Status> {
        let caller = check(&self.shared, &request, Operation::EnsureChannelGroup, None, None)?;
        let user = end_user(&caller)?;
        let Caller::Gateway(call) = &caller else { return Err(Status::internal("not a gateway")) };
        let record = self
            .shared
            .gateways
            .get(&call.gateway)
            .ok_or_else(|| Status::permission_denied("this gateway is no longer registered"))?;
        let message = request.into_inner();
        let id = record.kind.channel_group(&message.channel)?;
        let origin = format!("gateway:{}", call.gateway);
        let group = self.shared.groups.follow_chat(&id, &message.name, &user.id, message.left, &origin)?;
        let group = group.ok_or_else(|| Status::not_found("this chat has no group"))?;
        Ok(Response::new(group_info(id, group)))
    }
}

/// The `Admin` service.
#[derive(Debug, Clone)]
pub(super) struct AdminService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::admin_server::Admin for AdminService {
    async fn list_users(&self, request: Request<v1::ListUsersRequest>) -> Result<Response<v1::UserList>, Status> {
        check(&self.shared, &request, Operation::ListUsers, None, None)?;
        let users = self.shared.identities.users().into_iter().map(|user| profile(&self.shared, user)).collect();
        let waiting = self
            .shared
            .admissions
            .waiting()
            .into_iter()
            .map(|(identity, waiting)| v1::WaitingPerson {
                identity,
                name: waiting.name,
                gateway: waiting.gateway,
                since: crate::base::state::rfc3339(waiting.since),
            })
            .collect();
        Ok(Response::new(v1::UserList { users, waiting }))
    }

    async fn show_user(&self, request: Request<v1::UserRef>) -> Result<Response<v1::UserProfile>, Status> {
        let named = request.get_ref().user.clone();
        let view = self.shared.identities.user(&named).ok_or_else(|| IdentityError::UnknownUser(named.clone()))?;
        // A user may look at themselves.
        check(&self.shared, &request, Operation::ShowUser, Some(&Context::user(view.id.clone())), None)?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn link_identities(&self, request: Request<v1::LinkRequest>) -> Result<Response<v1::UserProfile>, Status> {
        check(&self.shared, &request, Operation::LinkIdentities, None, None)?;
        let message = request.into_inner();
        let view = self.shared.identities.link(&message.first, &message.second)?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn admit_identity(&self, request: Request<v1::AdmitRequest>) -> Result<Response<v1::UserProfile>, Status> {
        check(&self.shared, &request, Operation::AdmitIdentity, None, None)?;
        let message = request.into_inner();
        let identity = crate::people::identities::canonical(message.identity.trim());
        let waited = self.shared.admissions.waiting().into_iter().find(|(waiting, _)| *waiting == identity);
        let name = match message.name.trim() {
            "" => waited.map(|(_, waiting)| waiting.name).unwrap_or_default(),
            name => name.to_string(),
        };
        let resolved = self.shared.identities.resolve(&identity, &name)?;
        self.shared.admissions.settled(&identity).map_err(|error| Status::internal(error.to_string()))?;
        tracing::info!(%identity, user = %resolved.user, created = resolved.created, "admitted");
        let view =
            self.shared.identities.user(&resolved.user).ok_or_else(|| IdentityError::UnknownUser(resolved.user))?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn unlink_identity(&self, request: Request<v1::UnlinkRequest>) -> Result<Response<v1::UserProfile>, Status> {
        check(&self.shared, &request, Operation::UnlinkIdentity, None, None)?;
        let view = self.shared.identities.unlink(&request.get_ref().identity)?;
        Ok(Response::new(profile(&self.shared, view)))
    }

    async fn create_group(&self, request: Request<v1::CreateGroupRequest>) -> Result<Response<v1::GroupInfo>, Status> {
        check(&self.shared, &request, Operation::CreateGroup, None, None)?;
        let message = request.into_inner();
        let members =
            message.members.iter().map(|member| member_id(&self.shared, member)).collect::<Result<Vec<_>, _>>()?;
        let group = self.shared.groups.create(&message.id, &message.name, &members, "admin")?;
        Ok(Response::new(group_info(message.id, group)))
    }

    async fn list_groups(&self, request: Request<v1::ListGroupsRequest>) -> Result<Response<v1::GroupList>, Status> {
        let caller = check(&self.shared, &request, Operation::ListGroups, None, None)?;
        let mine = |id: &str| match &caller {
            Caller::Gateway(call) => {
                call.user.as_ref().is_some_and(|user| user.admin || user.groups.iter().any(|g| g == id))
            }
            _ => true,
        };
        let groups = self
            .shared
            .groups
            .list()
            .into_iter()
            .filter(|(id, _)| mine(id))
            .map(|(id, record)| group_info(id, record))
            .collect();
        Ok(Response::new(v1::GroupList { groups }))
    }

    async fn show_group(&self, request: Request<v1::GroupRef>) -> Result<Response<v1::GroupInfo>, Status> {
        let id = request.get_ref().id.clone();
        check(&self.shared, &request, Operation::ShowGroup, Some(&Context::group(id.clone())), None)?;
        let group = self.shared.groups.get(&id).ok_or_else(|| GroupError::NotFound(id.clone()))?;
        Ok(Response::new(group_info(id, group)))
    }

    async fn add_group_member(
        &self,
        request: Request<v1::GroupMemberRequest>,
    ) -> Result<Response<v1::GroupInfo>, Status> {
        check(&self.shared, &request, Operation::AddGroupMember, None, None)?;
        let message = request.into_inner();
        let member = member_id(&self.shared, &message.member)?;
        let group = self.shared.groups.add_member(&message.group, &member)?;
        Ok(Response::new(group_info(message.group, group)))
    }

    async fn remove_group_member(
        &self,
        request: Request<v1::GroupMemberRequest>,
    ) -> Result<Response<v1::GroupInfo>, Status> {
        check(&self.shared, &request, Operation::RemoveGroupMember, None, None)?;
        let message = request.into_inner();
        let member = member_id(&self.shared, &message.member)?;
        let group = self.shared.groups.remove_member(&message.group, &member)?;
        Ok(Response::new(group_info(message.group, group)))
    }

    async fn deactivate_group(
        &self,
        request: Request<v1::DeactivateGroupRequest>,
    ) -> Result<Response<v1::GroupInfo>, Status> {
        check(&self.shared, &request, Operation::DeactivateGroup, None, None)?;
        let message = request.into_inner();
        let group = self.shared.groups.deactivate(&message.id, &message.reason)?;
        Ok(Response::new(group_info(message.id, group)))
    }

    async fn reactivate_group(&self, request: Request<v1::GroupRef>) -> Result<Response<v1::GroupInfo>, Status> {
        check(&self.shared, &request, Operation::ReactivateGroup, None, None)?;
        let id = request.into_inner().id;
        let group = self.shared.groups.reactivate(&id)?;
        Ok(Response::new(group_info(id, group)))
    }

    async fn get_usage(&self, request: Request<v1::UsageRequest>) -> Result<Response<v1::UsageReport>, Status> {
        let named = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = match &named {
            Some(context) => check(&self.shared, &request, Operation::GetUsage, Some(context), None)?,
            None => check(&self.shared, &request, Operation::GetUsage, None, None)?,
        };
        let context = match (named, &caller) {
            (Some(context), _) => context,
            (None, Caller::Gateway(call)) => call
                .user
                .as_ref()
                .map(EndUser::context)
                .ok_or_else(|| Status::invalid_argument("context: name the user or group"))?,
            (None, _) => return Err(Status::invalid_argument("context: name the user or group")),
        };
        let report = self.shared.budgets.report(&context);
        let (recall, searched) = (self.shared.recall.clone(), context.clone());
        let kept = tokio::task::spawn_blocking(move || recall.size(&searched))
            .await
            .map_err(|error| Status::internal(format!("the index's size: {error}")))?;
        let kept = kept.unwrap_or_else(|error| {
            tracing::warn!(context = %context, error = %baaaht_proto::error_chain(&error), "cannot size the search index");
            (0, 0, 0)
        });
        Ok(Response::new(to_wire::usage_report(&context, report, self.shared.memory.most(), kept)))
    }

    async fn get_config(&self, request: Request<v1::ConfigRequest>) -> Result<Response<v1::ConfigText>, Status> {
        let section = request.get_ref().section.clone();
        let caller = super::caller(&request)?;
        let target = Target { config_section: Some(section.as_str()), ..Target::default() };
        crate::base::auth::authorize(&caller, Operation::GetConfig, target).map_err(Status::from)?;
        let key = match section.as_str() {
            "config" | "" => "config",
            "providers" => "providers",
            "allowlist" => "mount_allowlist",
            other => {
                return Err(Status::invalid_argument(format!(
                    "section `{other}`: ask for config, providers or allowlist"
                )))
            }
        };
        let document = crate::base::config::effective_document(&self.shared.loaded)
            .map_err(|error| Status::internal(error.to_string()))?;
        let text = serde_yaml::to_string(&document[key]).map_err(|error| Status::internal(error.to_string()))?;
        Ok(Response::new(v1::ConfigText { text }))
    }

    async fn restart_containers(&self, request: Request<v1::RestartRequest>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::RestartContainers, None, None)?;
        let session = request.into_inner().session_id;
        let sessions: Vec<String> = if session.is_empty() {
            self.shared
                .sessions
                .list(&crate::store::sessions::Filter::default())
                .into_iter()
                .map(|record| record.id)
                .collect()
        } else {
            super::valid_id(&session, "session_id")?;
            vec![session]
        };
        for session in &sessions {
            self.shared.tools.release(session).await;
        }
        self.shared.agents.reap_idle(&sessions).await;
        tracing::info!(sessions = sessions.len(), "containers restarted on request");
        Ok(Response::new(v1::Ack {
            message: format!(
                "the containers of {} session(s) were removed; they start again when needed",
                sessions.len()
            ),
        }))
    }

    async fn add_gateway(
        &self,
        request: Request<v1::AddGatewayRequest>,
    ) -> Result<Response<v1::AddGatewayResponse>, Status> {
        check(&self.shared, &request, Operation::AddGateway, None, None)?;
        let message = request.into_inner();
        let (kind, mode) = super::from_wire::gateway_run(&message)?;
        crate::work::gateways::check_run(&kind, mode, &message.args)?;
        if mode != crate::work::gateways::RunMode::External {
            let checked = self.shared.supervisors.check_args(&kind, &message.args).await;
            checked.map_err(|error| Status::invalid_argument(error.to_string()))?;
        }
        let (record, token) = self.shared.gateways.add(&message.name, kind, mode, message.args)?;
        let folder = self.shared.gateways.socket_folder(&record.name);
        if let Err(error) = self.shared.listeners.add_gateway(&record.name, &record.token_sha256, folder) {
            // Registered but not served: take it back rather than leave a gateway that cannot connect.
            let _ = self.shared.gateways.remove(&record.name); // silent-ok: the socket error below is what matters
            return Err(Status::internal(baaaht_proto::error_chain(&error)));
        }
        self.shared.supervisors.start(record.clone());
        // A gateway the daemon runs needs no token of its own: it gets one per run.
        let token = if mode == crate::work::gateways::RunMode::External { token } else { String::new() };
        Ok(Response::new(v1::AddGatewayResponse { gateway: Some(gateway_info(&self.shared, &record)), token }))
    }

    async fn list_gateways(
        &self,
        request: Request<v1::ListGatewaysRequest>,
    ) -> Result<Response<v1::GatewayList>, Status> {
        check(&self.shared, &request, Operation::ListGateways, None, None)?;
        let gateways = self.shared.gateways.list().iter().map(|record| gateway_info(&self.shared, record)).collect();
        Ok(Response::new(v1::GatewayList { gateways }))
    }

    async fn remove_gateway(&self, request: Request<v1::GatewayRef>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::RemoveGateway, None, None)?;
        let name = request.into_inner().name;
        self.shared.gateways.remove(&name)?;
        // The token stops working first; the gateway is stopped even if this call is dropped.
        self.shared.listeners.remove_gateway(&name);
        self.shared.supervisors.stop(&name).await;
        // What it kept between runs (a web gateway's sessions) goes with it.
        let state = self.shared.data_dir.gateway_state_dir(&name);
        if let Err(error) = std::fs::remove_dir_all(&state) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(gateway = %name, path = %state.display(), %error, "cannot remove the gateway's state");
            }
        }
        Ok(Response::new(v1::Ack { message: format!("gateway {name} removed; its token no longer works") }))
    }

    async fn restart_gateway(&self, request: Request<v1::GatewayRef>) -> Result<Response<v1::Ack>, Status> {
        let caller = check(&self.shared, &request, Operation::RestartGateway, None, None)?;
        let name = request.into_inner().name;
        let record =
            self.shared.gateways.get(&name).ok_or_else(|| {
                Status::not_found(format!("no gateway `{name}` is registered (baaahtd gateways list)"))
            })?;
        if record.mode == crate::work::gateways::RunMode::External {
            return Err(Status::failed_precondition(format!(
                "gateway {name} is external: whoever runs it restarts it; the daemon does not run it"
            )));
        }
        self.shared.supervisors.stop(&name).await;
        self.shared.supervisors.start(record);
        self.shared.audit.record(Record::by(Kind::Admin, &caller, "restarted").detail("gateway", name.as_str()));
        Ok(Response::new(v1::Ack { message: format!("gateway {name} restarted") }))
    }

    async fn list_mcp_servers(
        &self,
        request: Request<v1::McpServerRequest>,
    ) -> Result<Response<v1::McpServerList>, Status> {
        check(&self.shared, &request, Operation::ListMcpServers, None, None)?;
        super::mcp::list(&self.shared, request.into_inner()).await.map(Response::new)
    }

    async fn list_mcp_tools(
        &self,
        request: Request<v1::McpServerRequest>,
    ) -> Result<Response<v1::McpToolList>, Status> {
        let caller = check(&self.shared, &request, Operation::ListMcpTools, None, None)?;
        super::mcp::tools(&self.shared, &caller, request.into_inner()).await.map(Response::new)
    }

    async fn put_mcp_server(
        &self,
        request: Request<v1::PutMcpServerRequest>,
    ) -> Result<Response<v1::McpServerList>, Status> {
        let caller = check(&self.shared, &request, Operation::PutMcpServer, None, None)?;
        let message = request.into_inner();
        let name = message.name.clone();
        let listed = super::mcp::put(&self.shared, message).await?;
        self.shared.audit.record(Record::by(Kind::Mcp, &caller, "added").detail("server", name));
        Ok(Response::new(listed))
    }

    async fn remove_mcp_server(
        &self,
        request: Request<v1::McpServerRequest>,
    ) -> Result<Response<v1::McpServerList>, Status> {
        let caller = check(&self.shared, &request, Operation::RemoveMcpServer, None, None)?;
        let message = request.into_inner();
        let name = message.server.clone();
        let listed = super::mcp::remove(&self.shared, message).await?;
        self.shared.audit.record(Record::by(Kind::Mcp, &caller, "removed").detail("server", name));
        Ok(Response::new(listed))
    }

    async fn list_egress_rules(
        &self,
        request: Request<v1::EgressRulesRequest>,
    ) -> Result<Response<v1::EgressRules>, Status> {
        check(&self.shared, &request, Operation::ListEgressRules, None, None)?;
        super::egress::list(&self.shared, request.into_inner()).await.map(Response::new)
    }

    async fn change_egress_rule(
        &self,
        request: Request<v1::EgressRuleChange>,
    ) -> Result<Response<v1::EgressRules>, Status> {
        let caller = check(&self.shared, &request, Operation::ChangeEgressRule, None, None)?;
        let message = request.into_inner();
        let (host, action) = (message.host.clone(), message.action.clone());
        let by = crate::guard::audit::principal(&caller);
        let rules = super::egress::change(&self.shared, by, message).await?;
        let record = Record::by(Kind::Policy, &caller, "changed").detail("egress_rule", host).detail("action", action);
        self.shared.audit.record(record);
        Ok(Response::new(rules))
    }

    async fn change_egress_credential(
        &self,
        request: Request<v1::EgressCredentialChange>,
    ) -> Result<Response<v1::EgressRules>, Status> {
        // The same right as a rule's: the host's admin, on the host.
        let caller = check(&self.shared, &request, Operation::ChangeEgressRule, None, None)?;
        let message = request.into_inner();
        let (name, hosts, remove) = (message.name.clone(), message.hosts.join(","), message.remove);
        let by = crate::guard::audit::principal(&caller);
        let rules = super::egress::change_credential(&self.shared, by, message).await?;
        let outcome = if remove { "unbound" } else { "bound" };
        let record =
            Record::by(Kind::Policy, &caller, outcome).detail("egress_credential", name).detail("hosts", hosts);
        self.shared.audit.record(record);
        Ok(Response::new(rules))
    }

    async fn search_audit(&self, request: Request<v1::AuditQuery>) -> Result<Response<v1::AuditRecords>, Status> {
        check(&self.shared, &request, Operation::SearchAudit, None, None)?;
        let message = request.into_inner();
        let query = crate::guard::audit::Query {
            since: parse_since(&message.since, jiff::Timestamp::now())
                .map_err(|why| Status::invalid_argument(why.to_string()))?,
            user: Some(message.user).filter(|user| !user.is_empty()),
            kind: match message.kind.as_str() {
                "" => None,
                name => Some(crate::guard::audit::Kind::named(name).ok_or_else(|| {
                    let kinds: Vec<&str> = crate::guard::audit::Kind::ALL.iter().map(|kind| kind.as_str()).collect();
                    Status::invalid_argument(format!("kind `{name}`: use one of {}", kinds.join(", ")))
                })?),
            },
            limit: if message.limit == 0 { 1000 } else { message.limit as usize },
        };
        let audit = self.shared.audit.clone();
        let found = tokio::task::spawn_blocking(move || audit.search(&query))
            .await
            .map_err(|error| Status::internal(format!("the audit search failed: {error}")))?
            .map_err(|error| Status::internal(baaaht_proto::error_chain(&error)))?;
        let records = found
            .into_iter()
            .map(|record| v1::AuditRecord {
                time: record.time,
                kind: record.kind.as_str().into(),
                principal: record.principal,
                context: record.context,
                session_id: record.session,
                correlation_id: record.correlation_id,
                outcome: record.outcome,
                detail_json: serde_json::Value::Object(record.detail).to_string(),
            })
            .collect();
        Ok(Response::new(v1::AuditRecords { records }))
    }
}

/// `since` of an audit search: a duration back from `now` (`90s`, `15m`, `1h`, `2d`, `1w`) or an
/// RFC 3339 time.
fn parse_since(
    since: &str,
    now: jiff::Timestamp,
) -> Result<Option<jiff::Timestamp>, crate::server::from_wire::WireError> {
    let since = since.trim();
    if since.is_empty() {
        return Ok(None);
    }
    if let Ok(time) = since.parse::<jiff::Timestamp>() {
        return Ok(Some(time));
    }
    let problem = || crate::server::from_wire::WireError::Since(since.to_string());
    let split = since.find(|c: char| !c.is_ascii_digit()).ok_or_else(problem)?;
    let (number, unit) = since.split_at(split);
    let number: i64 = number.parse().map_err(|_not_a_number| problem())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(problem()),
    };
    let back = jiff::SignedDuration::from_secs(number.checked_mul(seconds).ok_or_else(problem)?);
    now.checked_sub(back).map(Some).map_err(|_out_of_range| problem())
}

#[cfg(test)]
mod audit_tests {
    use super::parse_since;

    #[test]
    fn since_takes_durations_and_times() {
        let now: jiff::Timestamp = "2026-11-23T12:00:00Z".parse().expect("time");
        assert_eq!(parse_since("", now), Ok(None));
        assert_eq!(parse_since("1h", now), Ok(Some("2026-11-23T11:00:00Z".parse().expect("time"))));
        assert_eq!(parse_since("2d", now), Ok(Some("2026-11-21T12:00:00Z".parse().expect("time"))));
        assert_eq!(parse_since("2026-11-01T00:00:00Z", now), Ok(Some("2026-11-01T00:00:00Z".parse().expect("time"))));
        let error = parse_since("yesterday", now).expect_err("refused").to_string();
        assert!(error.contains("since `yesterday`: write a duration like 90s"), "{error}");
        assert!(parse_since("5y", now).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_is_who_unwritable_for_a_full_disk_is_told_without_the_path() {
        let full = crate::base::state::StateError::Write {
            path: "/data/state/identities.journal".into(),
            source: std::io::Error::from(std::io::ErrorKind::StorageFull),
        };
        let status = Status::from(IdentityError::State(full));
        assert_eq!((status.code(), status.message()), (tonic::Code::ResourceExhausted, crate::base::state::DISK_FULL));
        let other = crate::base::state::StateError::Write {
            path: "/data/state/identities.journal".into(),
            source: std::io::Error::other("bad block"),
        };
        let status = Status::from(IdentityError::State(other));
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(!status.message().contains("/data"), "{}", status.message());
        // A first contact through a gateway, not recorded: the same sentences.
        let status = Status::from(crate::base::auth::AuthError::Unrecorded { disk_full: true });
        assert_eq!((status.code(), status.message()), (tonic::Code::ResourceExhausted, crate::base::state::DISK_FULL));
        let status = Status::from(crate::base::auth::AuthError::Unrecorded { disk_full: false });
        assert_eq!(status.code(), tonic::Code::Internal);
    }
}
