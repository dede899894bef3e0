//! The schema of a job file: per block, the arguments it takes (HCL name, JSON name, type)
//! and the blocks nested in it (where they go in the JSON, which label names them, how their
//! content is read). Nomad's names; the parser in [`super::hcl`] walks it.

/// What a value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Str,
    Int,
    Bool,
    /// A Go duration string or nanoseconds; nanoseconds in JSON.
    Dur,
    StrList,
}

/// An argument: HCL name, JSON name, type.
pub(super) type Arg = (&'static str, &'static str, Ty);

/// How a nested block's content is converted.
#[derive(Clone, Copy)]
pub(super) enum Content {
    /// By a schema.
    Spec(&'static Spec),
    /// A free map of strings (`meta`, `env`).
    StrMap,
    /// A free map of any values, nested blocks as lists (`config`).
    AnyMap,
    /// Every argument and block kept under its PascalCase name: for the blocks teamster
    /// refuses, so that they reach the check by name.
    Generic,
    /// `constraint` and `affinity`, with their shortcut arguments.
    Constraint { weight: bool },
    /// A task's `scaling "cpu"` / `scaling "mem"`: [`SCALING`], typed by its label
    /// (`vertical_cpu`, `vertical_mem`).
    VerticalScaling,
}

/// Where a nested block goes in its parent's JSON.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// One object; a second block is an error.
    One,
    /// Appended to a list.
    List,
    /// A map keyed by the block's label.
    ByLabel,
}

/// A nested block.
#[derive(Clone, Copy)]
pub(super) struct Nested {
    pub(super) hcl: &'static str,
    pub(super) json: &'static str,
    pub(super) place: Place,
    /// The JSON field the block's one label sets, if it takes a label.
    pub(super) label: Option<&'static str>,
    pub(super) content: Content,
}

pub(super) const fn one(hcl: &'static str, json: &'static str, content: Content) -> Nested {
    Nested {
        hcl,
        json,
        place: Place::One,
        label: None,
        content,
    }
}

pub(super) const fn list(hcl: &'static str, json: &'static str, content: Content) -> Nested {
    Nested {
        hcl,
        json,
        place: Place::List,
        label: None,
        content,
    }
}

pub(super) const fn named(
    hcl: &'static str,
    json: &'static str,
    label: &'static str,
    content: Content,
) -> Nested {
    Nested {
        hcl,
        json,
        place: Place::List,
        label: Some(label),
        content,
    }
}

pub(super) const fn generic(hcl: &'static str, json: &'static str) -> Nested {
    one(hcl, json, Content::Generic)
}

pub(super) const fn generic_list(hcl: &'static str, json: &'static str) -> Nested {
    list(hcl, json, Content::Generic)
}

/// A block's schema.
pub(super) struct Spec {
    pub(super) args: &'static [Arg],
    pub(super) blocks: &'static [Nested],
}

pub(super) const CONSTRAINT: Content = Content::Constraint { weight: false };
pub(super) const AFFINITY: Content = Content::Constraint { weight: true };

/// A task group's `scaling` block; `policy` is free-form (for an external autoscaler).
pub(super) static SCALING: Spec = Spec {
    args: &[
        ("min", "Min", Ty::Int),
        ("max", "Max", Ty::Int),
        ("enabled", "Enabled", Ty::Bool),
        ("type", "Type", Ty::Str),
    ],
    blocks: &[one("policy", "Policy", Content::AnyMap)],
};

/// A job's `periodic` block (the parser sets SpecType "cron" when `cron` or `crons` is given).
pub(super) static PERIODIC: Spec = Spec {
    args: &[
        ("cron", "Spec", Ty::Str),
        ("crons", "Specs", Ty::StrList),
        ("prohibit_overlap", "ProhibitOverlap", Ty::Bool),
        ("time_zone", "TimeZone", Ty::Str),
        ("enabled", "Enabled", Ty::Bool),
    ],
    blocks: &[],
};

pub(super) static SPREAD_TARGET: Spec = Spec {
    args: &[("percent", "Percent", Ty::Int)],
    blocks: &[],
};

pub(super) static SPREAD: Spec = Spec {
    args: &[
        ("attribute", "Attribute", Ty::Str),
        ("weight", "Weight", Ty::Int),
    ],
    blocks: &[named(
        "target",
        "SpreadTarget",
        "Value",
        Content::Spec(&SPREAD_TARGET),
    )],
};

pub(super) static RESTART: Spec = Spec {
    args: &[
        ("attempts", "Attempts", Ty::Int),
        ("interval", "Interval", Ty::Dur),
        ("delay", "Delay", Ty::Dur),
        ("mode", "Mode", Ty::Str),
        ("render_templates", "RenderTemplates", Ty::Bool),
    ],
    blocks: &[],
};

pub(super) static RESCHEDULE: Spec = Spec {
    args: &[
        ("attempts", "Attempts", Ty::Int),
        ("interval", "Interval", Ty::Dur),
        ("delay", "Delay", Ty::Dur),
        ("delay_function", "DelayFunction", Ty::Str),
        ("max_delay", "MaxDelay", Ty::Dur),
        ("unlimited", "Unlimited", Ty::Bool),
    ],
    blocks: &[],
};

pub(super) static RESOURCES: Spec = Spec {
    args: &[
        ("cpu", "CPU", Ty::Int),
        ("cores", "Cores", Ty::Int),
        ("memory", "MemoryMB", Ty::Int),
        ("memory_max", "MemoryMaxMB", Ty::Int),
        ("disk", "DiskMB", Ty::Int),
        ("secrets", "SecretsMB", Ty::Int),
    ],
    blocks: &[
        Nested {
            hcl: "device",
            json: "Devices",
            place: Place::List,
            label: Some("Name"),
            content: Content::Generic,
        },
        generic_list("network", "Networks"),
        generic("numa", "NUMA"),
    ],
};

pub(super) static TASK: Spec = Spec {
    args: &[
        ("driver", "Driver", Ty::Str),
        ("user", "User", Ty::Str),
        ("kill_timeout", "KillTimeout", Ty::Dur),
        ("kill_signal", "KillSignal", Ty::Str),
        ("leader", "Leader", Ty::Bool),
        ("shutdown_delay", "ShutdownDelay", Ty::Dur),
        ("kind", "Kind", Ty::Str),
    ],
    blocks: &[
        one("config", "Config", Content::AnyMap),
        one("env", "Env", Content::StrMap),
        one("meta", "Meta", Content::StrMap),
        one("resources", "Resources", Content::Spec(&RESOURCES)),
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
        one("restart", "RestartPolicy", Content::Spec(&RESTART)),
        generic("logs", "LogConfig"),
        generic_list("artifact", "Artifacts"),
        generic_list("template", "Templates"),
        generic_list("service", "Services"),
        generic("lifecycle", "Lifecycle"),
        generic("dispatch_payload", "DispatchPayload"),
        generic_list("volume_mount", "VolumeMounts"),
        generic("vault", "Vault"),
        generic("consul", "Consul"),
        generic("identity", "Identity"),
        generic("csi_plugin", "CSIPluginConfig"),
        generic_list("action", "Actions"),
        generic_list("secret", "Secrets"),
        list("scaling", "ScalingPolicies", Content::VerticalScaling),
        generic("schedule", "Schedule"),
    ],
};

pub(super) static GROUP: Spec = Spec {
    args: &[
        ("count", "Count", Ty::Int),
        ("shutdown_delay", "ShutdownDelay", Ty::Dur),
        ("max_run_duration", "MaxRunDuration", Ty::Dur),
        (
            "stop_after_client_disconnect",
            "StopAfterClientDisconnect",
            Ty::Dur,
        ),
        ("max_client_disconnect", "MaxClientDisconnect", Ty::Dur),
        (
            "prevent_reschedule_on_lost",
            "PreventRescheduleOnLost",
            Ty::Bool,
        ),
    ],
    blocks: &[
        named("task", "Tasks", "Name", Content::Spec(&TASK)),
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
        list("spread", "Spreads", Content::Spec(&SPREAD)),
        one("restart", "RestartPolicy", Content::Spec(&RESTART)),
        one("reschedule", "ReschedulePolicy", Content::Spec(&RESCHEDULE)),
        one("meta", "Meta", Content::StrMap),
        generic("ephemeral_disk", "EphemeralDisk"),
        generic("update", "Update"),
        generic("migrate", "Migrate"),
        generic_list("network", "Networks"),
        generic_list("service", "Services"),
        Nested {
            hcl: "volume",
            json: "Volumes",
            place: Place::ByLabel,
            label: Some("Name"),
            content: Content::Generic,
        },
        one("scaling", "Scaling", Content::Spec(&SCALING)),
        generic("consul", "Consul"),
        generic("disconnect", "Disconnect"),
    ],
};

pub(super) static JOB: Spec = Spec {
    args: &[
        ("region", "Region", Ty::Str),
        ("namespace", "Namespace", Ty::Str),
        ("id", "ID", Ty::Str),
        ("name", "Name", Ty::Str),
        ("type", "Type", Ty::Str),
        ("priority", "Priority", Ty::Int),
        ("all_at_once", "AllAtOnce", Ty::Bool),
        ("datacenters", "Datacenters", Ty::StrList),
        ("node_pool", "NodePool", Ty::Str),
        ("vault_token", "VaultToken", Ty::Str),
        ("consul_token", "ConsulToken", Ty::Str),
    ],
    blocks: &[
        named("group", "TaskGroups", "Name", Content::Spec(&GROUP)),
        // A job-level task becomes a one-task group of its name (moved after conversion).
        named("task", "Tasks", "Name", Content::Spec(&TASK)),
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
        list("spread", "Spreads", Content::Spec(&SPREAD)),
        one("meta", "Meta", Content::StrMap),
        generic("update", "Update"),
        generic("migrate", "Migrate"),
        generic("reschedule", "Reschedule"),
        one("periodic", "Periodic", Content::Spec(&PERIODIC)),
        generic("parameterized", "ParameterizedJob"),
        generic("multiregion", "Multiregion"),
        generic("ui", "UI"),
        generic("vault", "Vault"),
        generic_list("secret", "Secrets"),
    ],
};
