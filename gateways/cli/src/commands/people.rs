//! `baaaht users` and `baaaht groups`.

use baaaht_proto::v1;

use crate::args::{GroupsCommand, UsersCommand};
use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn users(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: UsersCommand,
) -> Result<(), CliError> {
    use crate::people::{user_text, users_text};
    let status = |status| CliError::from_status(status, socket);
    let text = match command {
        UsersCommand::List => {
            users_text(&client.admin.list_users(v1::ListUsersRequest {}).await.map_err(status)?.into_inner())
        }
        UsersCommand::Show { user } => {
            user_text(&client.admin.show_user(v1::UserRef { user }).await.map_err(status)?.into_inner())
        }
        UsersCommand::Link { first, second } => user_text(
            &client.admin.link_identities(v1::LinkRequest { first, second }).await.map_err(status)?.into_inner(),
        ),
        UsersCommand::Unlink { identity } => {
            user_text(&client.admin.unlink_identity(v1::UnlinkRequest { identity }).await.map_err(status)?.into_inner())
        }
        UsersCommand::Admit { identity, name } => {
            let request = v1::AdmitRequest { identity, name: name.unwrap_or_default() };
            user_text(&client.admin.admit_identity(request).await.map_err(status)?.into_inner())
        }
    };
    print!("{}", clean(&text));
    Ok(())
}

pub(crate) async fn groups(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: GroupsCommand,
) -> Result<(), CliError> {
    use crate::people::{group_text, groups_text};
    let status = |status| CliError::from_status(status, socket);
    let admin = &mut client.admin;
    let group = match command {
        GroupsCommand::List => {
            let list = admin.list_groups(v1::ListGroupsRequest {}).await.map_err(status)?.into_inner();
            print!("{}", clean(&groups_text(&list)));
            return Ok(());
        }
        GroupsCommand::Create { id, name, members } => {
            let request = v1::CreateGroupRequest { id, name: name.unwrap_or_default(), members };
            admin.create_group(request).await
        }
        GroupsCommand::Show { id } => admin.show_group(v1::GroupRef { id }).await,
        GroupsCommand::AddMember { id, member } => {
            admin.add_group_member(v1::GroupMemberRequest { group: id, member }).await
        }
        GroupsCommand::RemoveMember { id, member } => {
            admin.remove_group_member(v1::GroupMemberRequest { group: id, member }).await
        }
        GroupsCommand::Deactivate { id, reason } => {
            admin.deactivate_group(v1::DeactivateGroupRequest { id, reason }).await
        }
        GroupsCommand::Reactivate { id } => admin.reactivate_group(v1::GroupRef { id }).await,
    }
    .map_err(status)?
    .into_inner();
    print!("{}", clean(&group_text(&group)));
    Ok(())
}
