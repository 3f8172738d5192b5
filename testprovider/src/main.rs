//! `terraform-provider-captftest`: a Terraform provider plugin for CAPTF's tests.
//!
//! It manages one resource, `captftest_thing`, in a directory of JSON files (the "world",
//! [`world`]), so tests run real Terraform with no network and no cloud:
//!
//! | attribute | kind | effect of a change |
//! | --- | --- | --- |
//! | `name` | required string | replaces the thing (a destructive plan) |
//! | `content` | optional string | updates it in place |
//! | `id` | computed | `thing-<name>` |
//!
//! Reading a thing compares the world with the state: an edited file is drift (an update is
//! planned), a deleted file makes Terraform plan a create. `CAPTFTEST_HOLD` holds each change
//! in the middle (see [`world::HOLD_ENV`]).
//!
//! A second resource, `captftest_machine`, is a "VM": a record in the world's `machines/`
//! folder that a test's hypervisor (`captf_testprovider::hypervisor`) boots from its user data.
//!
//! | attribute | kind | effect of a change |
//! | --- | --- | --- |
//! | `name` | required string | replaces the machine |
//! | `user_data` | required sensitive string | replaces the machine (a new VM boots from it) |
//! | `id` | computed | `machine-<name>` |
//! | `provider_id` | computed | `captftest:///machine-<name>`, the ID a Node of it registers |
//!
//! Like providers written in Go, it ignores SIGINT: a Ctrl-C (or the runner's interrupt) goes
//! to the whole process group, and it is Terraform, not the provider, that decides how to stop.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, Block, Description, Schema};
use tf_provider::value::{ValueEmpty, ValueString};
use tf_provider::{AttributePath, Diagnostics, DynamicDataSource, DynamicResource, Provider, Resource, map, serve};

use captf_testprovider::world::{self, HOLD_ENV, Machine, Thing, World, WorldError, machine_provider_id};

/// The resource's attributes as Terraform sends them. `None` is a null object: a thing that
/// does not exist (returned by a read to tell Terraform it is gone).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
struct ThingState<'a> {
    #[serde(borrow = "'a")]
    id: ValueString<'a>,
    #[serde(borrow = "'a")]
    name: ValueString<'a>,
    #[serde(borrow = "'a")]
    content: ValueString<'a>,
}

impl ThingState<'_> {
    fn name(&self) -> Option<String> {
        self.name.as_ref_option().map(|n| n.to_string())
    }

    fn thing(&self) -> Option<Thing> {
        Some(Thing {
            name: self.name()?,
            content: self.content.as_ref_option().map(|c| c.to_string()).unwrap_or_default(),
        })
    }
}

fn id_of(name: &str) -> ValueString<'static> {
    ValueString::Value(Cow::Owned(format!("thing-{name}")))
}

fn world(diags: &mut Diagnostics) -> Option<World> {
    match World::from_env() {
        Ok(w) => Some(w),
        Err(e) => {
            diags.root_error_short(e.to_string());
            None
        }
    }
}

fn report<T>(diags: &mut Diagnostics, r: Result<T, WorldError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            diags.root_error_short(e.to_string());
            None
        }
    }
}

/// A `name` (when known) that a world file can be named by; else an error at the attribute.
fn validate_name(diags: &mut Diagnostics, name: Option<String>) -> Option<()> {
    if let Some(name) = name
        && let Err(e) = world::check_name(&name)
    {
        diags.error_short(e.to_string(), AttributePath::new("name"));
        return None;
    }
    Some(())
}

/// The longest a change is held: far past any test's own patience, so a test that never opens
/// the gate fails on its own wait first; a provider left behind still ends, saying why.
const HOLD_PATIENCE: Duration = Duration::from_secs(600);

/// With `CAPTFTEST_HOLD` set: write `<name>.busy`, wait for the hold file, remove the marker.
/// Past [`HOLD_PATIENCE`] without the hold file, the change fails naming the file it waited for.
async fn hold(diags: &mut Diagnostics, w: &World, name: &str) -> Option<()> {
    let Some(gate) = std::env::var_os(HOLD_ENV).filter(|g| !g.is_empty()).map(PathBuf::from) else {
        return Some(());
    };
    let marker = report(diags, w.busy_marker(name))?;
    if let Err(e) = tokio::fs::write(&marker, b"").await {
        diags.root_error_short(format!("failed to write {}: {e}", marker.display()));
        return None;
    }
    let deadline = tokio::time::Instant::now() + HOLD_PATIENCE;
    while !tokio::fs::try_exists(&gate).await.unwrap_or(false) {
        if tokio::time::Instant::now() > deadline {
            diags.root_error_short(format!(
                "{name} was held {HOLD_PATIENCE:?} and the hold file {} never appeared",
                gate.display()
            ));
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = tokio::fs::remove_file(&marker).await;
    Some(())
}

#[derive(Debug, Default, Clone, Copy)]
struct ThingResource;

#[async_trait]
impl Resource for ThingResource {
    type State<'a> = Option<ThingState<'a>>;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(Schema {
            version: 1,
            block: Block {
                version: 1,
                description: Description::plain("A thing in the test world: one JSON file"),
                attributes: map! {
                    "id" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("thing-<name>"),
                        constraint: AttributeConstraint::Computed,
                        ..Default::default()
                    },
                    "name" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("The file name in the world; a change replaces the thing"),
                        constraint: AttributeConstraint::Required,
                        ..Default::default()
                    },
                    "content" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("The thing's content; a change updates it in place"),
                        constraint: AttributeConstraint::Optional,
                        ..Default::default()
                    },
                },
                ..Default::default()
            },
        })
    }

    async fn validate<'a>(&self, diags: &mut Diagnostics, config: Self::State<'a>) -> Option<()> {
        validate_name(diags, config.as_ref().and_then(|c| c.name()))
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let Some(name) = state.as_ref().and_then(|s| s.name()) else {
            return Some((None, private_state));
        };
        let w = world(diags)?;
        let found = report(diags, w.read(&name))?;
        let state = found.map(|t| ThingState {
            id: id_of(&t.name),
            name: ValueString::Value(Cow::Owned(t.name)),
            content: ValueString::Value(Cow::Owned(t.content)),
        });
        Some((state, private_state))
    }

    async fn plan_create<'a>(
        &self,
        _diags: &mut Diagnostics,
        proposed_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let state = proposed_state.map(|mut s| {
            s.id = match s.name() {
                Some(n) => id_of(&n),
                None => ValueString::Unknown,
            };
            if s.content.is_null() {
                s.content = ValueString::Value(Cow::Borrowed(""));
            }
            s
        });
        Some((state, Default::default()))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        proposed_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        let mut replace = Vec::new();
        let prior_name = prior_state.as_ref().and_then(|s| s.name());
        let state = proposed_state.map(|mut s| {
            if s.name() != prior_name {
                replace.push(AttributePath::new("name"));
                s.id = match s.name() {
                    Some(n) => id_of(&n),
                    None => ValueString::Unknown,
                };
            }
            if s.content.is_null() {
                s.content = ValueString::Value(Cow::Borrowed(""));
            }
            s
        });
        Some((state, prior_private_state, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<Self::PrivateState<'a>> {
        Some(prior_private_state)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let w = world(diags)?;
        let Some(thing) = planned_state.as_ref().and_then(ThingState::thing) else {
            diags.root_error_short("create without a name");
            return None;
        };
        hold(diags, &w, &thing.name).await?;
        report(diags, w.write(&thing))?;
        Some((planned_state, private_state))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        _prior_state: Self::State<'a>,
        planned_state: Self::State<'a>,
        config_state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        // The name never changes in place (a change replaces), so an update is a write.
        <Self as Resource>::create(
            self,
            diags,
            planned_state,
            config_state,
            private_state,
            provider_meta_state,
        )
        .await
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        _private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let w = world(diags)?;
        let Some(name) = state.as_ref().and_then(|s| s.name()) else {
            return Some(());
        };
        hold(diags, &w, &name).await?;
        report(diags, w.delete(&name))
    }
}

/// A machine's attributes as Terraform sends them; `None` is a machine that does not exist.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
struct MachineState<'a> {
    #[serde(borrow = "'a")]
    id: ValueString<'a>,
    #[serde(borrow = "'a")]
    name: ValueString<'a>,
    #[serde(borrow = "'a")]
    user_data: ValueString<'a>,
    #[serde(borrow = "'a")]
    provider_id: ValueString<'a>,
}

impl MachineState<'_> {
    fn name(&self) -> Option<String> {
        self.name.as_ref_option().map(|n| n.to_string())
    }

    fn user_data(&self) -> Option<String> {
        self.user_data.as_ref_option().map(|n| n.to_string())
    }

    /// The computed attributes from the name (unknown while the name is).
    fn with_computed(mut self) -> Self {
        match self.name() {
            Some(n) => {
                self.id = ValueString::Value(Cow::Owned(format!("machine-{n}")));
                self.provider_id = ValueString::Value(Cow::Owned(machine_provider_id(&n)));
            }
            None => {
                self.id = ValueString::Unknown;
                self.provider_id = ValueString::Unknown;
            }
        }
        self
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct MachineResource;

#[async_trait]
impl Resource for MachineResource {
    type State<'a> = Option<MachineState<'a>>;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(Schema {
            version: 1,
            block: Block {
                version: 1,
                description: Description::plain("A machine of the test world, booted by the test's hypervisor"),
                attributes: map! {
                    "id" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("machine-<name>"),
                        constraint: AttributeConstraint::Computed,
                        ..Default::default()
                    },
                    "name" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("The machine's name; a change replaces it"),
                        constraint: AttributeConstraint::Required,
                        ..Default::default()
                    },
                    "user_data" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("What the machine boots from; a change replaces it"),
                        constraint: AttributeConstraint::Required,
                        sensitive: true,
                        ..Default::default()
                    },
                    "provider_id" => Attribute {
                        attr_type: AttributeType::String,
                        description: Description::plain("captftest:///machine-<name>"),
                        constraint: AttributeConstraint::Computed,
                        ..Default::default()
                    },
                },
                ..Default::default()
            },
        })
    }

    async fn validate<'a>(&self, diags: &mut Diagnostics, config: Self::State<'a>) -> Option<()> {
        validate_name(diags, config.as_ref().and_then(|c| c.name()))
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let Some(name) = state.as_ref().and_then(|s| s.name()) else {
            return Some((None, private_state));
        };
        let w = world(diags)?;
        let found = report(diags, w.read_machine(&name))?;
        let state = found.map(|m| {
            MachineState {
                name: ValueString::Value(Cow::Owned(m.name)),
                user_data: ValueString::Value(Cow::Owned(m.user_data)),
                ..Default::default()
            }
            .with_computed()
        });
        Some((state, private_state))
    }

    async fn plan_create<'a>(
        &self,
        _diags: &mut Diagnostics,
        proposed_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        Some((proposed_state.map(MachineState::with_computed), Default::default()))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        proposed_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        let mut replace = Vec::new();
        let prior = prior_state.as_ref();
        if let Some(p) = &proposed_state {
            if p.name() != prior.and_then(|s| s.name()) {
                replace.push(AttributePath::new("name"));
            }
            if p.user_data() != prior.and_then(|s| s.user_data()) {
                replace.push(AttributePath::new("user_data"));
            }
        }
        Some((
            proposed_state.map(MachineState::with_computed),
            prior_private_state,
            replace,
        ))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<Self::PrivateState<'a>> {
        Some(prior_private_state)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let w = world(diags)?;
        let Some((name, user_data)) = planned_state.as_ref().and_then(|s| Some((s.name()?, s.user_data()?))) else {
            diags.root_error_short("create without a name or user data");
            return None;
        };
        hold(diags, &w, &name).await?;
        let machine = Machine {
            provider_id: machine_provider_id(&name),
            name,
            user_data,
        };
        report(diags, w.write_machine(&machine))?;
        Some((planned_state, private_state))
    }

    async fn update<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior_state: Self::State<'a>,
        planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        // Every attribute a user sets replaces the machine; nothing is updated in place.
        Some((planned_state, private_state))
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        _private_state: Self::PrivateState<'a>,
        _provider_meta_state: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let w = world(diags)?;
        let Some(name) = state.as_ref().and_then(|s| s.name()) else {
            return Some(());
        };
        hold(diags, &w, &name).await?;
        report(diags, w.delete_machine(&name))
    }
}

#[derive(Debug, Default, Clone)]
struct TestProvider;

#[async_trait]
impl Provider for TestProvider {
    type Config<'a> = ValueEmpty;
    type MetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(Schema {
            version: 1,
            block: Block {
                description: Description::plain(
                    "CAPTF's test provider: things in a directory named by CAPTFTEST_WORLD",
                ),
                ..Default::default()
            },
        })
    }

    async fn validate<'a>(&self, _diags: &mut Diagnostics, _config: Self::Config<'a>) -> Option<()> {
        Some(())
    }

    async fn configure<'a>(
        &self,
        diags: &mut Diagnostics,
        _terraform_version: String,
        _config: Self::Config<'a>,
    ) -> Option<()> {
        world(diags).map(|_| ())
    }

    fn get_resources(&self, _diags: &mut Diagnostics) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        Some(map! { "thing" => ThingResource, "machine" => MachineResource })
    }

    fn get_data_sources(&self, _diags: &mut Diagnostics) -> Option<HashMap<String, Box<dyn DynamicDataSource>>> {
        Some(map! {})
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // Ignore SIGINT as go-plugin providers do: the handler stays installed and nothing acts on it.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::spawn(async move { while interrupts.recv().await.is_some() {} });
    serve("captftest", TestProvider).await
}
