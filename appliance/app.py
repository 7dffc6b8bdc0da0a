"""The composition root: `build(settings)` wires every component; nothing else constructs them."""

from __future__ import annotations

import gc
import logging
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import grpc

from appliance import __version__, cluster, cpus
from appliance.agent_registry import AgentRegistry
from appliance.artifacts import CA_FILE, ArtifactStore
from appliance.export import JsonLinesExporter
from appliance.enrollment import EnrollmentService, EnrollmentStore, StreamGate, default_endpoints
from appliance.config import LimitSettings, Settings, split_listen
from appliance.flows.finished import FinishedFlows
from appliance.flows.record_codec import EndedFlow
from appliance.flows.tracker import FlowLimits, FlowTimeouts, FlowTracker
from appliance.ingest.convert import ConvertLimits, PacketConverter
from appliance.ingest.service import IngestService
from appliance.ingest.servicer import SensorServicer, StreamAuthorizer, create_server
from appliance.console_settings import ConsoleSettingsStore
from appliance.metrics import MetricsCollector, MetricsHistory, ThroughputMeter
from appliance.retention import RetentionService
from appliance.model import FlowRecord
from appliance.pipeline import AnalysisPipeline
from appliance.analysis.local import LocalAnalysis, NoAnalysis
from appliance.analysis.process import AnalysisProcess
from appliance.detection import SAMPLED_PROTOCOLS, DetectionParts
from appliance.detection.alert_channel import AlertChannel
from appliance.detection.alert_store import AlertStore
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.analysis_config_store import ConfigStore, load_analysis_config
from appliance.detection.behaviour import BehaviourLayer
from appliance.detection.correlation import Correlator
from appliance.detection.database import DB_FILE as DETECTION_DB
from appliance.detection.database import DetectionDatabase
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_words import WordModel
from appliance.detection.dpi.layer import DpiLayer
from appliance.detection.dpi.tls_cert import TrustAnchors
from appliance.detection.exclusions import ExclusionStore
from appliance.detection.facts import FlowFacts
from appliance.detection.resolutions import ResolverCache
from appliance.detection.signatures.engine import SignatureEngine
from appliance.detection.signatures.rule_files import RuleFiles
from appliance.detection.signatures.watcher import SignatureWatcher
from appliance.pki import CertificateAuthority, default_server_names
from appliance.rest import routes_core, routes_detection
from appliance.rest import routes_enrollment, routes_settings
from appliance.rest import routes_capture
from appliance.capture.interfaces import InterfaceCatalog
from appliance.capture.supervisor import CaptureOptions, CaptureSupervisor, StreamTarget
from appliance.rest.api import Api
from appliance.rest.openapi import build_openapi
from appliance.rest.server import ConnectionLimits, HttpServer

log = logging.getLogger(__name__)

ADMIN_TOKEN_ENV = "SENSOR_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "admin.token"
ENROLLMENT_DB = "enrollment.sqlite3"
CAPTURE_DIR = "capture"  # under paths.state_dir: the capture's spec, status, state and certificate
# Enrollment script templates (installer/ at the repository root).
INSTALLER_DIR = Path(__file__).resolve().parent.parent / "installer"


def load_admin_token(state_dir: Path) -> tuple[str, bool]:
    """The admin token from the environment, else from `<state_dir>/admin.token` (created 0600).

    Returns the token and whether it was generated just now (so it can be shown once).
    """
    from_env = os.environ.get(ADMIN_TOKEN_ENV, "").strip()
    if from_env:
        return from_env, False
    path = state_dir / ADMIN_TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token, False
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token, True


@dataclass
class Appliance:
    """The running object graph. `start()` opens the ports, `stop()` drains and closes."""

    settings: Settings
    ingest: IngestService
    tracker: FlowTracker
    analysis: LocalAnalysis | AnalysisProcess | NoAnalysis  # where flows go: a thread here or the analysis process
    agents: AgentRegistry
    api: Api
    history: MetricsHistory
    ca: CertificateAuthority
    admin_token: str
    admin_token_created: bool
    enrollment: EnrollmentService
    enrollment_store: EnrollmentStore
    artifacts: ArtifactStore
    retention: RetentionService
    console_settings: ConsoleSettingsStore
    capture: CaptureSupervisor
    detection_db: DetectionDatabase | None = None
    watcher: SignatureWatcher | None = None  # this process's view of the rule files follows them
    # The analysis stack when it runs on a thread of this process (analysis.worker: thread), else None.
    detection: DetectionParts | None = None
    pipeline: AnalysisPipeline | None = None
    grpc_port: int = 0
    rest_port: int = 0
    _grpc: grpc.Server | None = None
    _rest: HttpServer | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    stream_gate: StreamAuthorizer | None = None  # certificate binding and revocation (enrollment)
    _cpus_before: set[int] | None = None  # this process's CPUs before pin_cpus(), restored by stop()

    def start(self) -> None:
        s = self.settings
        self.analysis.start()  # the process was spawned in build(), before gRPC: this starts its sender
        self.history.start()
        if self.watcher is not None:
            self.watcher.start()
        self.retention.start()
        servicer = SensorServicer(self.ingest, authorize=self.stream_gate)
        credentials = None
        if s.cluster.role == "manager":  # the manager ingests nothing: no gRPC port
            pass
        elif s.grpc.tls:
            credentials = grpc.ssl_server_credentials(
                [(self.ca.server_key_path.read_bytes(), self.ca.server_cert_path.read_bytes())],
                root_certificates=self.ca.ca_pem,
                require_client_auth=True,
            )
        else:
            log.warning("grpc.tls is false: agents stream in clear text and are not authenticated")
        if s.cluster.role != "manager":
            self._grpc, self.grpc_port = create_server(
                servicer, s.grpc.listen, credentials=credentials,
                max_workers=s.grpc.max_streams, max_message_bytes=s.grpc.max_message_bytes,
            )
        host, port = split_listen(s.rest.listen)
        cert = key = None
        if s.rest.tls:
            cert, key = self.ca.server_cert_path, self.ca.server_key_path
        limits = ConnectionLimits(
            head_timeout=s.rest.head_timeout, body_timeout=s.rest.body_timeout, min_body_rate=s.rest.min_body_rate,
            keepalive_timeout=s.rest.keepalive_timeout, write_timeout=s.rest.write_timeout,
            max_per_source=s.rest.max_connections_per_source, max_connections=s.rest.max_connections,
        )
        def body_limit(method: str, path: str) -> int:
            # The upload route measures its limit on the Content-Length too (multipart framing included).
            return s.artifacts.max_upload_bytes if path == routes_enrollment.ARTIFACTS_PATH else s.rest.max_body_bytes

        self._rest = HttpServer(self.api.app, host, port, threads=s.rest.threads, cert_file=cert, key_file=key, name="rest",
                                body_limit=body_limit, limits=limits)
        self._rest.start()
        self.rest_port = self._rest.port
        self.capture.start()  # after gRPC: a resumed capture streams into it at once
        sweeper = threading.Thread(target=self._sweep, name="flow-sweep", daemon=True)
        sweeper.start()
        self._threads.append(sweeper)
        log.info("listening grpc=%s:%d tls=%s rest=%s:%d tls=%s", split_listen(s.grpc.listen)[0], self.grpc_port,
                 s.grpc.tls, host, self.rest_port, s.rest.tls)

    def rest_stats(self) -> dict[str, Any]:
        """The HTTP front's open connections and refusals by reason (empty before start)."""
        return self._rest.stats() if self._rest is not None else {}

    def _sweep(self) -> None:
        while not self._stop.wait(self.settings.analysis.sweep_interval):
            self.tracker.sweep()

    def pin_cpus(self) -> dict[str, list[int]] | None:
        """`analysis.pin_cpus`: the analysis process on a CPU of its own, this process's threads on the
        others (`python -m appliance`, after start). The plan applied, or None when there is nothing to
        split (no analysis process, fewer than two usable CPUs) or the system refuses (logged)."""
        if not (self.settings.analysis.pin_cpus and isinstance(self.analysis, AnalysisProcess)):
            return None
        before = os.sched_getaffinity(0)
        plan = cpus.split_cpus(before)
        if plan is None:
            return None
        server, analysis = plan
        try:
            cpus.pin_process(0, server)
            self.analysis.pin(analysis)  # claims nothing when refused
        except OSError as err:
            try:  # all or nothing: the server's threads get back what they had
                cpus.pin_process(0, before)
            except OSError:
                pass
            log.warning("analysis.pin_cpus: not applied (%s); the kernel places both processes", err)
            return None
        self._cpus_before = before
        log.info("CPUs: server %s, analysis process %s", sorted(server), sorted(analysis))
        return {"server": sorted(server), "analysis": sorted(analysis)}

    def stop(self) -> None:
        """Stop accepting, flush every flow through analysis, close."""
        self._stop.set()
        self.capture.close()
        if self._grpc is not None:
            self._grpc.stop(grace=2).wait(5)
        for thread in self._threads:
            thread.join(timeout=5)
        self.tracker.flush_all()
        self.analysis.drain()  # every flushed flow through analysis (and the export) before the stores close
        self.analysis.stop()
        self.history.stop()
        self.retention.stop()
        if self._rest is not None:
            self._rest.stop()
        self.enrollment_store.close()
        if self.watcher is not None:
            self.watcher.stop()
        if self.detection_db is not None:
            self.detection_db.close()
        if self._cpus_before is not None:  # an embedding process (a test, a bench) gets its CPUs back
            cpus.pin_process(0, self._cpus_before)
            self._cpus_before = None


@dataclass
class DetectionStores:
    """The detection database and what lives in it: opened by the server and by the analysis process."""

    db: DetectionDatabase
    config: AnalysisConfigHolder
    alerts: AlertStore
    exclusions: ExclusionStore
    console_settings: ConsoleSettingsStore


def open_stores(settings: Settings, alerts_saved_elsewhere: bool = False, batched_alerts: bool = False) -> DetectionStores:
    """Open (and migrate) the detection database with its stores.

    `alerts_saved_elsewhere`: the server beside an analysis process (it counts active alerts from the
    table); `batched_alerts`: the analysis process (it commits alerts once per round of flows).
    """
    db = DetectionDatabase(settings.paths.state_dir / DETECTION_DB)
    config_store = ConfigStore(db)
    config = AnalysisConfigHolder(load_analysis_config(config_store, settings.analysis.detectors), config_store)
    return DetectionStores(db, config, AlertStore(db, shared=alerts_saved_elsewhere, batched=batched_alerts),
                           ExclusionStore(db), ConsoleSettingsStore(db, config))


def build_analysis(settings: Settings, stores: DetectionStores, on_drop: Callable[[str, int], None] | None = None,
                   *, tls_views: bool = True) -> tuple[DetectionParts, AnalysisPipeline]:
    """Wire the analysis stack (layers, correlation, alerts out, export) on `stores`.

    The one recipe for both places analysis runs: a thread of the server, or the analysis process
    (`appliance.analysis.worker`). The three layers run one after another (threads under the GIL would
    only add switching), then exclusions and the console's layer switches, then correlation into alerts.
    `tls_views`: put each flow's TLS view on its record for the REST API; off where the records analysed
    are copies the REST API never sees (the analysis process, an analyzer of the cluster).
    """
    paths = settings.paths
    config = stores.config
    domains = RegisteredDomains()
    facts = FlowFacts(tls_views=tls_views)
    resolver = ResolverCache()
    scorer = NameScorer.load()
    dpi = DpiLayer(config, facts, resolver, domains, scorer, WordModel.load(scorer), TrustAnchors.load(paths.tls_trust_anchors))
    signatures = SignatureEngine(paths.signatures_dir, config, facts, domains)
    signatures.reload()
    behaviour = BehaviourLayer(config)
    channel = AlertChannel()
    channel.subscribe(stores.alerts.save)
    export = settings.export
    exporter = JsonLinesExporter(export.path or paths.state_dir / "export" / "eve.json", flows=export.flows, alerts=export.alerts,
                                 queue_size=export.queue, max_bytes=export.max_bytes, keep=export.keep) if export.enabled else None
    if exporter is not None:
        channel.subscribe(exporter.alert)
    correlator = Correlator(config, stores.alerts, channel)
    console_settings, exclusions = stores.console_settings, stores.exclusions
    pipeline = AnalysisPipeline(layers=[dpi, signatures, behaviour], correlator=correlator,
                                queue_size=settings.limits.analysis_queue,
                                detection_filter=lambda d: console_settings.allows(d) and exclusions.allows(d),
                                on_drop=on_drop)
    parts = DetectionParts(
        db=stores.db, config=config, resolver=resolver, dpi=dpi, signatures=signatures,
        watcher=SignatureWatcher(paths.signatures_dir, signatures.reload), behaviour=behaviour,
        correlator=correlator, channel=channel, alerts=stores.alerts, exclusions=exclusions,
        facts=facts, exporter=exporter,
    )
    return parts, pipeline


def flow_limits(limits: LimitSettings) -> FlowLimits:
    """The flow table's bounds as the server sets them: the configured ones, payload samples kept only for the
    protocols analysis reads (a UDP flow's would be copied, handed over and skipped unread)."""
    return FlowLimits(limits.max_flows, limits.samples_per_flow, limits.sample_bytes, limits.dns_per_flow,
                      max_flows_per_agent=limits.max_flows_per_agent, sampled_protocols=SAMPLED_PROTOCOLS)


def build(settings: Settings) -> Appliance:
    """Wire the appliance from settings (no network is opened until `start()`)."""
    paths = settings.paths
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    admin_token, created = load_admin_token(paths.state_dir)
    server_names = list(dict.fromkeys(settings.tls.server_names + default_server_names()))
    ca = CertificateAuthority.ensure(paths.certs_dir, server_names)

    limits = settings.limits
    timeouts = settings.analysis.flow_timeouts
    stores = open_stores(settings, alerts_saved_elsewhere=settings.analysis.worker == "process")
    detection_db, analysis_config, alert_store = stores.db, stores.config, stores.alerts
    exclusions, console_settings = stores.exclusions, stores.console_settings
    agents = AgentRegistry()
    detection: DetectionParts | None = None
    pipeline: AnalysisPipeline | None = None
    analysis: LocalAnalysis | AnalysisProcess | NoAnalysis
    if settings.cluster.role != "standalone" or settings.analysis.worker in ("process", "off"):
        if settings.cluster.role != "standalone":  # ingest or manager: analysis happens elsewhere (appliance/cluster)
            analysis = cluster.sink_for(settings, stores, on_drop=agents.analysis_dropped)
        elif settings.analysis.worker == "process":
            # Analysis on the other core: a process of its own, started before any gRPC object exists.
            analysis = AnalysisProcess(settings, limits.analysis_queue, on_drop=agents.analysis_dropped)
            analysis.spawn()
        else:
            log.warning("analysis.worker is off: flows are tracked and listed but never analysed; no alerts will be raised")
            analysis = NoAnalysis()
        for source in (analysis_config, console_settings):
            source.on_change(lambda _new: analysis.reload())
        exclusions.on_change(analysis.reload)
        # The REST layer's own view of the rules (listing, validation, uploads); analysis loads them too.
        signatures = SignatureEngine(paths.signatures_dir, analysis_config, FlowFacts(), RegisteredDomains())
        signatures.reload()
        watcher = SignatureWatcher(paths.signatures_dir, signatures.reload)
    else:
        detection, pipeline = build_analysis(settings, stores, on_drop=agents.analysis_dropped)
        analysis = LocalAnalysis(detection, pipeline)
        signatures, watcher = detection.signatures, detection.watcher
    finished = FinishedFlows(limits.finished_flows_kept)
    retention = RetentionService(console_settings, alert_store, finished, detection_db)

    def apply_retention(_new: object) -> None:  # a shorter retention applies at once, not at the next pass
        retention.enforce()

    console_settings.on_change(apply_retention)

    def on_expire(flows: list[EndedFlow]) -> None:
        finished.extend(flows)
        analysis.submit_many(flows)

    converter = PacketConverter(ConvertLimits(max_payload_bytes=limits.max_payload_bytes))
    tracker = FlowTracker(
        on_expire,
        FlowTimeouts(timeouts.tcp_idle, timeouts.udp_idle, timeouts.dns_idle, timeouts.icmp_idle,
                     timeouts.other_idle, timeouts.active, timeouts.dns_active),
        flow_limits(limits),
        on_dns_responses=analysis.observe_answers, reader=converter.wire,
        # Analysed in this process: ended flows are FlowRecords, samples expanded. Else they leave as the C
        # table wrote them (a flow Python never held, as a whole record in the contract's encoding).
        ended_as_wire=analysis.mode != "thread",
    )
    # Only the analysis process's hand-off gathers ended flows for a few milliseconds; a stream's end sends its
    # flows at once (bench/pipeline_bench.py: the last agents' flows no longer wait out the gathering, 2026-11-30).
    ingest = IngestService(converter, tracker, agents, on_dns_event=analysis.observe_dns,
                           on_stream_closed=analysis.send_now if isinstance(analysis, AnalysisProcess) else None,
                           max_streams_per_agent=settings.grpc.max_streams_per_agent)

    collector = MetricsCollector({
        "packets_received": lambda: ingest.packets_received,
        "packets_rejected": lambda: ingest.packets_rejected,
        "events_received": lambda: ingest.events_received,
        "events_rejected": lambda: ingest.events_rejected,
        "events_malformed": lambda: ingest.events_malformed,
        "streams_refused_per_agent": lambda: ingest.streams_refused,
        "active_flows": lambda: tracker.active_flows,
        "flows_created": lambda: tracker.flows_created,
        "flows_processed": lambda: analysis.counter("flows_processed"),
        "flows_evicted": lambda: tracker.flows_evicted,
        "flows_evicted_agent_cap": lambda: tracker.flows_evicted_agent_cap,
        "flows_refused_bucket": lambda: tracker.flows_refused_bucket,
        "analysis_queue_depth": lambda: analysis.queue_depth,
        "analysis_queue_oldest_s": lambda: round(analysis.oldest_wait_s, 3),
        "analysis_queue_dropped": lambda: analysis.flows_dropped,
        "analysis_dropped_by_agent": lambda: dict(analysis.dropped_by_agent),
        "analysis_errors": lambda: analysis.counter("analysis_errors"),
        "analysis_worker": lambda: {"cluster": {}, "frames_refused": 0, "signature_rules": 0, "signature_reloads": 0, "cpus": [],
                                    "channel_buffer": 0, "memory_reserved": 0, **analysis.status()},  # cluster: a cluster role's Redis counters
        "detections_generated": lambda: analysis.counter("detections_generated"),
        "detections_suppressed": lambda: analysis.counter("detections_suppressed"),
        "alerts_generated": lambda: analysis.counter("alerts_generated"),
        "active_alerts": lambda: alert_store.active,
        "signature_rules": lambda: signatures.loaded,
        "tls_handshakes": lambda: analysis.counter("tls_handshakes"),
        "tls_handshakes_incomplete": lambda: analysis.counter("tls_handshakes_incomplete"),
        "tls_handshakes_unreadable": lambda: analysis.counter("tls_handshakes_unreadable"),
        "tls_certificates_unreadable": lambda: analysis.counter("tls_certificates_unreadable"),
        "alerts_updated": lambda: analysis.counter("alerts_updated"),
        "agents_online": lambda: agents.online,
        "rejected_by_reason": lambda: ingest.rejected_by_reason,
        "repaired_by_reason": lambda: ingest.repaired_by_reason,
        "rest_connections": lambda: appliance.rest_stats(),
        "blanket_exclusions": lambda: len(exclusions.blanket()),
        "export": lambda: analysis.export_stats(),
        "retention_alerts_deleted": lambda: retention.alerts_deleted,
        "retention_flows_deleted": lambda: retention.flows_deleted,
    }, derived=[ThroughputMeter(lambda: ingest.packets_received, lambda: ingest.bytes_received,
                                lambda: alert_store.active).fields])
    history = MetricsHistory(collector, settings.metrics.history_interval)
    api = Api(admin_token, settings.rest.max_body_bytes, check_replies=settings.rest.check_replies)
    routes_detection.install(api, alerts=alert_store, exclusions=exclusions, signatures=signatures,
                             rule_files=RuleFiles(signatures), config=analysis_config)
    routes_settings.install(api, settings=console_settings)
    routes_core.install(
        api, collector=collector, history=history, tracker=tracker, finished=finished, agents=agents,
        events=ingest.recent_events, openapi=lambda: build_openapi(api.routes), warnings=exclusions.warnings,
    )

    # Enrollment: the payload under /static, tokens and certificates in SQLite, the stream gate.
    artifacts = ArtifactStore(paths.static_dir, settings.artifacts.max_upload_bytes)
    artifacts.publish(CA_FILE, ca.ca_pem)
    artifacts.refresh()
    enrollment_store = EnrollmentStore(paths.state_dir / ENROLLMENT_DB)

    def endpoints(request_host: str = "") -> Any:  # late-bound: the ports are known once `appliance.start()` has run
        return default_endpoints(settings.enrollment.base_url, settings.enrollment.grpc_url, server_names[0],
                                 appliance.rest_port, appliance.grpc_port, settings.rest.tls, request_host)

    enrollment = EnrollmentService(
        enrollment_store, ca, artifacts, template_dir=INSTALLER_DIR, endpoints=endpoints,
        token_ttl_s=settings.enrollment.token_ttl_hours * 3600, cert_days=settings.tls.agent_cert_days,
        product=settings.enrollment.product,
    )
    routes_enrollment.install(
        api, enrollment=enrollment, artifacts=artifacts,
        deploy_token=os.environ.get(routes_enrollment.DEPLOY_TOKEN_ENV, "").strip(),
        scripts_over_tls=settings.rest.tls or settings.enrollment.base_url.startswith("https://"),
    )
    # The appliance's own port capture: a supervised process streaming into this appliance's gRPC.
    def capture_target() -> StreamTarget:  # late-bound: the gRPC port is known once started
        host = split_listen(settings.grpc.listen)[0]
        host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        host = f"[{host}]" if ":" in host else host
        return StreamTarget(f"{host}:{appliance.grpc_port}", "localhost", not settings.grpc.tls)

    def issue_capture_certificate(name: str) -> tuple[bytes, bytes]:
        issued = ca.issue_agent(name, days=settings.tls.agent_cert_days)
        return issued.cert_pem, issued.key_pem

    capture_catalog = InterfaceCatalog()
    capture = CaptureSupervisor(
        paths.state_dir / CAPTURE_DIR, capture_catalog,
        CaptureOptions(tuple(settings.capture.internal_networks), settings.capture.runner,
                       settings.capture.restart_backoff_initial, settings.capture.restart_backoff_max),
        defaults=lambda: console_settings.current.capture, issue_certificate=issue_capture_certificate,
        ca_pem=ca.ca_pem, target=capture_target, version=__version__,
        resume_allowed=lambda: console_settings.current.general.autoStart,
    )
    routes_capture.install(api, supervisor=capture, catalog=capture_catalog)
    appliance = Appliance(
        settings=settings, ingest=ingest, tracker=tracker, analysis=analysis, pipeline=pipeline, agents=agents, api=api,
        history=history, ca=ca, admin_token=admin_token, admin_token_created=created, enrollment=enrollment,
        enrollment_store=enrollment_store, artifacts=artifacts, retention=retention, console_settings=console_settings,
        capture=capture, detection=detection, detection_db=detection_db, watcher=watcher,
        stream_gate=StreamGate(enrollment_store),
    )
    return appliance


# Collector thresholds of the server process. Every packet a flow keeps (payload samples, DNS
# messages) allocates a few tracked objects, and with CPython's default first-generation threshold
# (700) the collector ran every few hundred kept packets, scanning the live flow records each time:
# it cost a third of the batched ingestion rate (docs/figures.md). At 50,000 it runs a few times a
# second under full load; the older generations keep the default ratios. Objects alive after
# start-up (modules, rules, models) are frozen out of the scans.
GC_THRESHOLDS = (50_000, 10, 10)


def tune_garbage_collector() -> None:
    """Apply the server's collector policy; called once per process, after start-up."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# An analysis process (the worker, a cluster analyzer) makes no cyclic garbage: a test runs every
# scenario with the collector off and finds nothing to collect. Its state (memos, windows, baselines)
# still grows by tens of thousands of tracked objects per second under load, and each automatic pass
# scanned them for nothing: 4-5% of its CPU on the bench corpus. There, automatic collection is off
# and a full collection runs on a timer, which bounds what a cycle from a rare path (an exception's
# traceback kept somewhere) could hold.
ANALYSIS_GC_EVERY = 30.0  # seconds between the timed collections of an analysis process


def tune_analysis_garbage_collector(stop: threading.Event, every: float = ANALYSIS_GC_EVERY) -> threading.Thread:
    """Apply an analysis process's collector policy (after start-up): automatic collection off, a full
    collection every `every` seconds until `stop` is set."""
    tune_garbage_collector()
    gc.disable()

    def collect() -> None:
        while not stop.wait(every):
            found = gc.collect()
            if found:  # a cycle somewhere: harmless at this rate, but worth knowing about
                log.info("timed garbage collection found %d unreachable objects", found)

    thread = threading.Thread(target=collect, name="analysis-gc", daemon=True)
    thread.start()
    return thread
