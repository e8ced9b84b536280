"""SpeakerConfig: kube-bgpd's own daemon settings (every field has a default)."""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from bgpd.attributes import WELL_KNOWN
from bgpd.config.fields import (
    KUBE_BGPD_V1ALPHA1,
    NO_CONTROL,
    Column,
    Field,
    KindTable,
    max_seconds,
    names,
)
from bgpd.config.issues import Doc
from bgpd.config.values import (
    join_path,
    read_bool,
    read_duration,
    read_fields,
    read_int,
    read_secret,
    read_text,
    read_text_list,
    show,
)
from bgpd.model import (
    AnnotationPolicy,
    DataPlaneCheck,
    LogFormat,
    MQTTConfig,
    SigtermAction,
    SpeakerConfig,
)

MQTT_FIELDS: Final = (
    Field("host", ref="text", required=True),
    Field("port", ref="port", default=1883),
    Field(
        "topicPrefix", type="string", pattern=r"^[^\u0000-\u001f\u007f+#]+$", default="kube-bgpd"
    ),
    Field("username", ref="text"),
    Field("password", ref="text"),
    Field("tls", type="boolean", default=False),
)


def _seconds(maximum: int) -> tuple[Field, Field]:
    """A duration string, or (our own kind only) a number of seconds, up to `maximum`."""
    return (Field(ref="duration"), Field(type="number", minimum=0, maximum=maximum))


#: Bounds of SpeakerConfig's durations (seconds), generous against any real use.
DEBOUNCE_MAX: Final = 60
DRAIN_WINDOW_MAX: Final = 3600
PROBE_INTERVAL_MAX: Final = 3600
PROBE_TIMEOUT_MAX: Final = 60
#: SpeakerConfig bfdWatchdog's bounds: below 1 s a scrape or a full collection of a large
#: cluster could kill bfdd (docs/bfd.md, hazards); above 60 s the hold timer is sooner.
BFD_WATCHDOG_MIN: Final = 1
BFD_WATCHDOG_MAX: Final = 60
STATUS_INTERVAL_MAX: Final = 3600
STATUS_WRITES_MAX: Final = 1000
_DP = DataPlaneCheck()
DATA_PLANE_CHECK_FIELDS: Final = (
    Field(
        "nodeURL",
        type="string",
        pattern=r"^https?://[^\u0000-\u0020\u007f]+$",
        default=_DP.node_url,
        description="kube-proxy's healthz URL on this node; it gates every route.",
    ),
    Field("serviceHost", ref="text", default=_DP.service_host),
    Field("services", type="boolean", default=_DP.services),
    Field(
        "interval",
        any_of=_seconds(PROBE_INTERVAL_MAX),
        default="1s",
        max_seconds=PROBE_INTERVAL_MAX,
    ),
    Field(
        "timeout", any_of=_seconds(PROBE_TIMEOUT_MAX), default="1s", max_seconds=PROBE_TIMEOUT_MAX
    ),
    Field("failureThreshold", type="integer", minimum=1, maximum=100, default=3),
    Field("successThreshold", type="integer", minimum=1, maximum=100, default=2),
)

#: The status condition that says whether a SpeakerConfig is in force (written by the
#: controller when it reads the configuration from the cluster).
ACCEPTED_CONDITION: Final = "Accepted"

ANNOTATION_POLICY_FIELDS: Final = (
    Field(
        "namespaces",
        type="array",
        items=Field(ref="text"),
        unique_items=True,
        description="Namespaces whose Services may set the attribute annotations "
        "(kube-bgpd.io/communities, local-pref, med); absent: every namespace.",
    ),
    Field(
        "allowedWellKnownCommunities",
        type="array",
        items=Field(enum=tuple(sorted(WELL_KNOWN))),
        unique_items=True,
        description="Well-known communities those annotations may use; absent: all.",
    ),
)

SPEAKER: Final = KindTable(
    kind="SpeakerConfig",
    api_version=KUBE_BGPD_V1ALPHA1,
    definition="SpeakerConfig",
    description="kube-bgpd's own daemon settings; every field has a default.",
    spec=(
        Field("loadBalancerClass", type="string", nullable=True, pattern=NO_CONTROL, default=None),
        Field("ignoreExcludeLB", type="boolean", default=False),
        Field("exabgpBinary", ref="text", default="exabgp"),
        Field("workDir", ref="text", default="/run/kube-bgpd"),
        Field(
            "metricsAddress",
            type="string",
            pattern=r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):[0-9]{1,5}$",
            default="127.0.0.1:7473",
        ),
        Field("mqtt", type="object", nullable=True, fields=MQTT_FIELDS),
        Field("debounce", any_of=_seconds(DEBOUNCE_MAX), default=0, max_seconds=DEBOUNCE_MAX),
        Field("logFormat", enum=tuple(x.value for x in LogFormat), default="text"),
        Field(
            "drainWindow",
            any_of=_seconds(DRAIN_WINDOW_MAX),
            default="30s",
            max_seconds=DRAIN_WINDOW_MAX,
        ),
        Field(
            "onSigterm",
            enum=tuple(x.value for x in SigtermAction),
            default="withdraw",
            description="What a graceful stop (SIGTERM) does with the node's routes: withdraw "
            "them; drain (RFC 8326) then withdraw; or retain them at graceful-restart peers "
            "(stale until the next speaker refreshes them).",
        ),
        Field("listen", type="boolean", default=False),
        Field(
            "dataPlaneCheck",
            type="object",
            nullable=True,
            fields=DATA_PLANE_CHECK_FIELDS,
            description="Announce only while kube-proxy's health answers pass (off when "
            "absent); see docs/configuration.md.",
        ),
        Field(
            "allowEmptyConfig",
            type="boolean",
            default=False,
            description="A reload (SIGHUP) to a config with no BGPPeer or no IPAddressPool "
            "is refused (the running config is kept) unless this is true.",
        ),
        Field(
            "annotationPolicy",
            type="object",
            nullable=True,
            fields=ANNOTATION_POLICY_FIELDS,
            description="Which Services may set attribute annotations and which well-known "
            "communities they may use (absent: all); see docs/configuration.md.",
        ),
        Field(
            "exposeStatus",
            type="boolean",
            default=False,
            description="Also serve GET /status on metricsAddress (always on the control "
            "socket in workDir); POST /drain is never served there.",
        ),
        Field(
            "bfdStrict",
            type="boolean",
            default=True,
            description="Announce to a peer with a bfdProfile only while its BFD session is "
            "Up (its routes are held back otherwise); false: BFD only tears sessions down.",
        ),
        Field(
            "bfdWatchdog",
            any_of=(
                Field(ref="duration"),
                Field(type="number", minimum=BFD_WATCHDOG_MIN, maximum=BFD_WATCHDOG_MAX),
            ),
            default="5s",
            max_seconds=BFD_WATCHDOG_MAX,
            description="Seconds the speaker may hang (event loop stalled, or ExaBGP not "
            "answering) before bfdd is killed so the routers drop this node (1-60).",
        ),
        Field(
            "clusterStatus",
            type="boolean",
            default=True,
            description="Write this node's status objects in the cluster (ServiceBGPStatus, "
            "BGPNodeStatus); with the Kubernetes API as the cluster source only.",
        ),
        Field(
            "statusInterval",
            any_of=_seconds(STATUS_INTERVAL_MAX),
            default="1s",
            max_seconds=STATUS_INTERVAL_MAX,
            description="The least time between two writes of one status object.",
        ),
        Field(
            "statusWritesPerSecond",
            type="integer",
            minimum=1,
            maximum=STATUS_WRITES_MAX,
            default=20,
            description="Status object writes per second at most, for the whole node.",
        ),
    ),
    plural="speakerconfigs",
    columns=(
        Column(
            ACCEPTED_CONDITION,
            f'.status.conditions[?(@.type=="{ACCEPTED_CONDITION}")].status',
            "string",
        ),
        Column("Age", ".metadata.creationTimestamp", "date"),
    ),
)


#: The SpeakerConfig fields (spec name, SpeakerConfig attribute) a speaker reads once, when
#: it starts: what they configure is built then (the listener, the work directory, the
#: MQTT client, ExaBGP's launcher and rendering, the status writer's limits, the BFD
#: watchdog, the reconciler's debounce, the drain's window, the log handler). A reload
#: (SIGHUP, or a changed SpeakerConfig object) puts everything else in force and says
#: which of these wait for the next start (restart_needed()).
READ_AT_START: Final = (
    ("exabgpBinary", "exabgp_binary"),
    ("workDir", "work_dir"),
    ("metricsAddress", "metrics_address"),
    ("mqtt", "mqtt"),
    ("debounce", "debounce"),
    ("logFormat", "log_format"),
    ("drainWindow", "drain_window"),
    ("listen", "listen"),
    ("exposeStatus", "expose_status"),
    ("bfdWatchdog", "bfd_watchdog"),
    ("clusterStatus", "cluster_status"),
    ("statusInterval", "status_interval"),
    ("statusWritesPerSecond", "status_writes_per_second"),
)
#: The fields a reload puts in force at once (read where they are used).
#: `dataPlaneCheck` is both: its settings and its removal follow a reload, adding it
#: takes a start.
READ_LIVE: Final = (
    ("loadBalancerClass", "load_balancer_class"),
    ("ignoreExcludeLB", "ignore_exclude_lb"),
    ("onSigterm", "on_sigterm"),
    ("allowEmptyConfig", "allow_empty_config"),
    ("annotationPolicy", "annotation_policy"),
    ("bfdStrict", "bfd_strict"),
    ("dataPlaneCheck", "data_plane_check"),
)


def restart_needed(started: SpeakerConfig, new: SpeakerConfig) -> tuple[str, ...]:
    """The fields (``spec.<name>``) in which ``new`` differs from the SpeakerConfig the
    speaker started with and that take effect only at its next start: without this a
    reload that changed, say, ``mqtt.host`` was applied without a word while the speaker
    kept publishing to the old broker."""
    out = [
        f"spec.{name}"
        for name, attr in READ_AT_START
        if getattr(started, attr) != getattr(new, attr)
    ]
    if started.data_plane_check is None and new.data_plane_check is not None:
        out.append("spec.dataPlaneCheck")
    return tuple(out)


def _flag(doc: Doc, f: Mapping[str, object], name: str, default: bool) -> bool:
    """An optional boolean field of spec: absent keeps the default, an invalid one is an
    error (and the default, so parsing goes on to report the rest)."""
    if f.get(name) is None:
        return default
    return read_bool(doc, f"spec.{name}", f[name]) is True


def _duration(doc: Doc, f: Mapping[str, object], name: str, default: float, maximum: int) -> float:
    """An optional duration field of spec in seconds, bounded by `maximum`."""
    if f.get(name) is None:
        return default
    got = read_duration(doc, f"spec.{name}", f[name], numbers=True, maximum=maximum)
    return float(got) if got is not None else default


def _host_port(doc: Doc, path: str, value: object) -> str | None:
    """HOST:PORT, IPv6 hosts in brackets; port 0 asks the kernel for a free one (tests)."""
    text = read_text(doc, path, value)
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        doc.error(path, f"{text!r} must be HOST:PORT (IPv6 as [::1]:7473), port 0-65535")
        return None
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            doc.error(path, f"{text!r}: {host} is not an IPv6 address")
            return None
    elif ":" in host:
        doc.error(path, f"{text!r}: write an IPv6 host in brackets, e.g. [::1]:7473")
        return None
    return text


def parse_speaker(doc: Doc, spec: object) -> SpeakerConfig | None:
    f = read_fields(doc, "spec", {} if spec is None else spec, names(SPEAKER.spec))
    if f is None:
        return None
    before = doc.errors
    d = SpeakerConfig()
    lb_class = d.load_balancer_class
    if f.get("loadBalancerClass") is not None:
        lb_class = read_text(doc, "spec.loadBalancerClass", f["loadBalancerClass"])
    ignore = d.ignore_exclude_lb
    if f.get("ignoreExcludeLB") is not None:
        ignore = read_bool(doc, "spec.ignoreExcludeLB", f["ignoreExcludeLB"]) is True
    binary = d.exabgp_binary
    if f.get("exabgpBinary") is not None:
        binary = read_text(doc, "spec.exabgpBinary", f["exabgpBinary"]) or binary
    work_dir = d.work_dir
    if f.get("workDir") is not None:
        wd = read_text(doc, "spec.workDir", f["workDir"])
        if wd is not None:
            work_dir = Path(wd)
    metrics = d.metrics_address
    if f.get("metricsAddress") is not None:
        metrics = _host_port(doc, "spec.metricsAddress", f["metricsAddress"]) or metrics
    mqtt = None
    if f.get("mqtt") is not None:
        mqtt = _mqtt(doc, "spec.mqtt", f["mqtt"])
    debounce = _duration(doc, f, "debounce", d.debounce, DEBOUNCE_MAX)
    log_format = d.log_format
    if f.get("logFormat") is not None:
        lf = f["logFormat"]
        if not isinstance(lf, str) or lf not in {x.value for x in LogFormat}:
            doc.error("spec.logFormat", f"{show(lf)} is not one of text, json")
        else:
            log_format = LogFormat(str(lf))
    drain = _duration(doc, f, "drainWindow", d.drain_window, DRAIN_WINDOW_MAX)
    on_sigterm = d.on_sigterm
    if f.get("onSigterm") is not None:
        action = f["onSigterm"]
        if not isinstance(action, str) or action not in {x.value for x in SigtermAction}:
            doc.error(
                "spec.onSigterm",
                f"{show(action)} is not one of {', '.join(x.value for x in SigtermAction)}",
            )
        else:
            on_sigterm = SigtermAction(str(action))
    listen = _flag(doc, f, "listen", d.listen)
    data_plane = None
    if f.get("dataPlaneCheck") is not None:
        data_plane = _data_plane_check(doc, "spec.dataPlaneCheck", f["dataPlaneCheck"])
    allow_empty = _flag(doc, f, "allowEmptyConfig", d.allow_empty_config)
    policy = None
    if f.get("annotationPolicy") is not None:
        policy = _annotation_policy(doc, "spec.annotationPolicy", f["annotationPolicy"])
    expose_status = _flag(doc, f, "exposeStatus", d.expose_status)
    bfd_strict = _flag(doc, f, "bfdStrict", d.bfd_strict)
    bfd_watchdog = _duration(doc, f, "bfdWatchdog", d.bfd_watchdog, BFD_WATCHDOG_MAX)
    if bfd_watchdog < BFD_WATCHDOG_MIN:
        doc.error("spec.bfdWatchdog", f"{bfd_watchdog:g} is below {BFD_WATCHDOG_MIN} second")
    cluster_status = _flag(doc, f, "clusterStatus", d.cluster_status)
    status_interval = _duration(doc, f, "statusInterval", d.status_interval, STATUS_INTERVAL_MAX)
    status_writes = d.status_writes_per_second
    if f.get("statusWritesPerSecond") is not None:
        got = read_int(
            doc, "spec.statusWritesPerSecond", f["statusWritesPerSecond"], 1, STATUS_WRITES_MAX
        )
        status_writes = got if got is not None else status_writes
    if doc.errors != before:
        return None
    return SpeakerConfig(
        load_balancer_class=lb_class,
        ignore_exclude_lb=ignore,
        exabgp_binary=binary,
        work_dir=work_dir,
        metrics_address=metrics,
        mqtt=mqtt,
        debounce=debounce,
        log_format=log_format,
        drain_window=drain,
        on_sigterm=on_sigterm,
        listen=listen,
        data_plane_check=data_plane,
        allow_empty_config=allow_empty,
        annotation_policy=policy,
        expose_status=expose_status,
        bfd_strict=bfd_strict,
        bfd_watchdog=bfd_watchdog,
        cluster_status=cluster_status,
        status_interval=status_interval,
        status_writes_per_second=status_writes,
    )


def _annotation_policy(doc: Doc, path: str, value: object) -> AnnotationPolicy | None:
    f = read_fields(doc, path, value, names(ANNOTATION_POLICY_FIELDS))
    if f is None:
        return None
    before = doc.errors
    namespaces = None
    if f.get("namespaces") is not None:
        got = read_text_list(doc, join_path(path, "namespaces"), f["namespaces"])
        namespaces = frozenset(got) if got is not None else None
    allowed = None
    if f.get("allowedWellKnownCommunities") is not None:
        at = join_path(path, "allowedWellKnownCommunities")
        got = read_text_list(doc, at, f["allowedWellKnownCommunities"])
        for name in got or ():
            if name not in WELL_KNOWN:
                doc.error(at, f"{name!r} is not one of {', '.join(sorted(WELL_KNOWN))}")
        allowed = frozenset(got) if got is not None else None
    if doc.errors != before:
        return None
    return AnnotationPolicy(namespaces=namespaces, allowed_well_known_communities=allowed)


def _data_plane_check(doc: Doc, path: str, value: object) -> DataPlaneCheck | None:
    f = read_fields(doc, path, value, names(DATA_PLANE_CHECK_FIELDS))
    if f is None:
        return None
    before = doc.errors
    d = DataPlaneCheck()
    url = d.node_url
    if f.get("nodeURL") is not None:
        at = join_path(path, "nodeURL")
        got = read_text(doc, at, f["nodeURL"])
        if got is not None:
            parts = urllib.parse.urlsplit(got)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                doc.error(at, f"{got!r} must be an http:// or https:// URL with a host")
            url = got
    host = d.service_host
    if f.get("serviceHost") is not None:
        at = join_path(path, "serviceHost")
        got = read_text(doc, at, f["serviceHost"])
        if got is not None:
            try:
                ipaddress.ip_address(got)
            except ValueError:
                doc.error(at, f"{got!r} is not an IP address")
            host = got
    services = d.services
    if f.get("services") is not None:
        services = read_bool(doc, join_path(path, "services"), f["services"]) is True
    seconds: dict[str, float] = {"interval": d.interval, "timeout": d.timeout}
    for name in seconds:
        if f.get(name) is not None:
            at = join_path(path, name)
            bound = max_seconds(DATA_PLANE_CHECK_FIELDS, name)
            got_s = read_duration(doc, at, f[name], numbers=True, maximum=bound)
            if got_s is not None and got_s <= 0:
                doc.error(at, "must be more than 0")
            elif got_s is not None:
                seconds[name] = float(got_s)
    counts = {"failureThreshold": d.failure_threshold, "successThreshold": d.success_threshold}
    for name in counts:
        if f.get(name) is not None:
            counts[name] = read_int(doc, join_path(path, name), f[name], 1, 100) or counts[name]
    if doc.errors != before:
        return None
    return DataPlaneCheck(
        node_url=url,
        service_host=host,
        services=services,
        interval=seconds["interval"],
        timeout=seconds["timeout"],
        failure_threshold=counts["failureThreshold"],
        success_threshold=counts["successThreshold"],
    )


def _mqtt(doc: Doc, path: str, value: object) -> MQTTConfig | None:
    f = read_fields(doc, path, value, names(MQTT_FIELDS))
    if f is None:
        return None
    before = doc.errors
    host = None
    if f.get("host") in (None, ""):
        doc.error(join_path(path, "host"), "is required")
    else:
        host = read_text(doc, join_path(path, "host"), f["host"])
    d = MQTTConfig(host="")
    port = d.port
    if f.get("port") is not None:
        port = read_int(doc, join_path(path, "port"), f["port"], 1, 65535) or port
    prefix = d.topic_prefix
    if f.get("topicPrefix") is not None:
        got = read_text(doc, join_path(path, "topicPrefix"), f["topicPrefix"])
        if got is not None and ("+" in got or "#" in got):
            doc.error(
                join_path(path, "topicPrefix"), f"{got!r}: MQTT wildcards + and # are not allowed"
            )
        prefix = got or prefix
    username = password = None
    if f.get("username") is not None:
        username = read_text(doc, join_path(path, "username"), f["username"])
    if f.get("password") is not None:
        password = read_secret(doc, join_path(path, "password"), f["password"])
    tls = d.tls
    if f.get("tls") is not None:
        tls = read_bool(doc, join_path(path, "tls"), f["tls"]) is True
    if doc.errors != before or host is None:
        return None
    return MQTTConfig(
        host=host, port=port, topic_prefix=prefix, username=username, password=password, tls=tls
    )
