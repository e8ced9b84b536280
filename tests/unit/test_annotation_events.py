"""An annotation typo must not take a Service down: the speaker's Decider keeps the last
valid attributes, and AnnouncementEvents says so once in a Warning Event that names the
annotation and what it accepts."""

from __future__ import annotations

from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.decision import ANNOTATION_LOCAL_PREF, Decider
from bgpd.model import ClusterSnapshot, Config, Decision, NodeName, Service
from k8s_watcher.writer import AnnouncementEvents, EventRecorder, EventType, ObjectRef

WEB = "default/web"
API = "default/api"
N1 = NodeName("n1")
TOR = peer("tor-a", "172.31.250.1")
ISP = peer("isp", "172.31.250.9", peer_asn=65001)
SYNTAX = "accepted: an unsigned 32-bit integer (0-4294967295)"


class _Collector(EventRecorder):
    """Keeps what AnnouncementEvents records, instead of queueing it for the API."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, EventType, str, str]] = []

    def record(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool:
        self.seen.append((ref.name, type_, reason, message))
        return True


def _web(local_pref: str, key: str = WEB) -> Service:
    return svc(key, "198.51.100.1", annotations={ANNOTATION_LOCAL_PREF: local_pref})


class _Speaker:
    """A Decider and the Events a speaker records from its decisions, pass by pass."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.decider = Decider()
        self.events = _Collector()
        self.announcements = AnnouncementEvents(self.events, N1)
        self.previous: Decision | None = None

    def step(self, snapshot: ClusterSnapshot) -> tuple[Decision, list[tuple[str, str, str]]]:
        decision = self.decider.decide(self.cfg, snapshot, N1)
        before = len(self.events.seen)
        self.announcements.observe(self.previous, decision, snapshot.services)
        self.previous = decision
        warnings = [(n, r, m) for n, t, r, m in self.events.seen[before:] if t is EventType.WARNING]
        return decision, warnings


def _state(*services: Service) -> ClusterSnapshot:
    return cluster(list(services), [eps(s.key, ep("n1")) for s in services], [node("n1")])


def test_a_typo_keeps_the_route_and_warns_once() -> None:
    speaker = _Speaker(
        config(pools=[pool("v4", "198.51.100.0/24")], peers=[TOR], advertisements=[adv()])
    )
    decision, warnings = speaker.step(_state(_web("200")))
    assert [r.attributes.local_pref for r in decision.routes] == [200]
    assert warnings == []

    decision, warnings = speaker.step(_state(_web("high")))
    assert [r.attributes.local_pref for r in decision.routes] == [200]
    assert warnings == [
        (
            "web",
            "invalidAnnotationKept",
            f"node 'n1': {ANNOTATION_LOCAL_PREF}: 'high': value 'high' is not a number; "
            f"{SYNTAX}; keeping the attributes of the last valid annotations",
        )
    ]
    # Another Service comes and goes: the typo is old news, no second Warning.
    other = svc(API, "198.51.100.2")
    assert speaker.step(_state(_web("high"), other))[1] == []
    assert speaker.step(_state(_web("high")))[1] == []

    decision, warnings = speaker.step(_state(_web("300")))
    assert [r.attributes.local_pref for r in decision.routes] == [300]
    assert warnings == []


def test_a_new_service_with_a_typo_is_not_announced_and_warned_about() -> None:
    speaker = _Speaker(
        config(pools=[pool("v4", "198.51.100.0/24")], peers=[TOR], advertisements=[adv()])
    )
    decision, warnings = speaker.step(_state(_web("high")))
    assert decision.routes == ()
    assert warnings == [
        (
            "web",
            "invalidAnnotation",
            f"node 'n1': not announced: {ANNOTATION_LOCAL_PREF}: 'high': value 'high' is not "
            f"a number; {SYNTAX}",
        )
    ]
    assert speaker.step(_state(_web("high")))[1] == []


def test_local_pref_to_an_ebgp_peer_warns_once() -> None:
    speaker = _Speaker(
        config(pools=[pool("v4", "198.51.100.0/24")], peers=[TOR, ISP], advertisements=[adv()])
    )
    decision, warnings = speaker.step(_state(_web("200")))
    assert [(r.peer, r.attributes.local_pref) for r in decision.routes] == [
        ("isp", None),
        ("tor-a", 200),
    ]
    assert warnings == [
        (
            "web",
            "attributeNotSent",
            f"node 'n1': {ANNOTATION_LOCAL_PREF} 200 is not sent to eBGP peers isp: "
            "LOCAL_PREF is for iBGP peers only (RFC 4271 5.1.5)",
        )
    ]
    assert speaker.step(_state(_web("200"), svc(API, "198.51.100.2")))[1] == []
