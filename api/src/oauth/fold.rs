//! How OAuth clients' and grants' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// The tenants' own authorization servers.
    pub(crate) fn fold_oauth(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OAuthClientSetV1 { tenant_id, client } => {
                let oauth = self.oauth.entry(tenant_id.clone()).or_default();
                oauth.clients.insert(client.client_id.clone(), client.clone());
            }
            Event::OAuthClientRemovedV1 { tenant_id, client_id } => {
                if let Some(oauth) = self.oauth.get_mut(tenant_id) {
                    oauth.remove_client(client_id);
                }
            }
            Event::OAuthSettingsSetV1 { tenant_id, settings } => {
                self.oauth.entry(tenant_id.clone()).or_default().settings = settings.clone();
            }
            Event::OAuthGrantV1 { tenant_id, change, at_ms } => {
                self.oauth.entry(tenant_id.clone()).or_default().apply(change, *at_ms);
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}
