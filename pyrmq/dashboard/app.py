"""The dashboard's pages and JSON endpoints (a Starlette app).

Pages are rendered on the server from Jinja2 templates; an action (a form
POST) answers with a redirect back to its page carrying a `notice` or an
`error` line, so reloading a page never repeats the action. Names that may
hold '%' (retry and DLQ topics) travel in query strings, not paths.

Every failure a user can cause or meet (an unknown topic, a malformed
number, an unreachable broker, a timeout) becomes a one-line message on the
page, or {"error": "..."} from /api/*, with a 4xx/5xx status; anything else
is logged with its traceback and shown as one line as well."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import pathlib
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from pyrmq.admin.cli_common import fmt_time, parse_timestamp
from pyrmq.admin.results import as_json, message_as_dict, send_result_as_dict
from pyrmq.common.errors import (
    BrokerError,
    ClientError,
    QueryNotFoundError,
    RemotingError,
    RMQError,
    TopicNotExistError,
)
from pyrmq.common.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from pyrmq.dashboard.service import DashboardService

log = logging.getLogger("pyrmq.dashboard")
_HERE = pathlib.Path(__file__).parent
Handler = Callable[[Request], Awaitable[Response]]


class BadInput(ValueError):
    """A form or query value the dashboard cannot use."""


def _status_of(e: BaseException) -> tuple[int, str]:
    """(HTTP status, one line) for a failure."""
    if isinstance(e, TopicNotExistError | QueryNotFoundError):
        return 404, str(e)
    if isinstance(e, BadInput | ClientError | argparse.ArgumentTypeError):
        return 400, str(e)
    if isinstance(e, BrokerError):
        return 502, f"{type(e).__name__}: {e}"
    if isinstance(e, RemotingError | RMQError):
        return 502, str(e) or type(e).__name__
    if isinstance(e, TimeoutError):
        return 504, "the cluster did not answer in time"
    if isinstance(e, ValueError):
        return 400, str(e)
    return 500, f"internal error ({type(e).__name__}: {e})"


# -- reading input ------------------------------------------------------------------------


class Form:
    """The values of a query string or an urlencoded form body."""

    def __init__(self, values: dict[str, list[str]]) -> None:
        self.values = values

    def text(self, name: str, default: str = "") -> str:
        v = self.values.get(name)
        return v[0].strip() if v else default

    def required(self, name: str, label: str | None = None) -> str:
        v = self.text(name)
        if not v:
            raise BadInput(f"{label or name} is missing")
        return v

    def number(self, name: str, default: int | None = None, label: str | None = None) -> int:
        v = self.text(name)
        if not v:
            if default is None:
                raise BadInput(f"{label or name} is missing")
            return default
        try:
            return int(v)
        except ValueError:
            raise BadInput(f"{label or name} must be a whole number, not {v!r}") from None

    def time(self, name: str, label: str) -> int | None:
        """Epoch ms from a datetime-local value (server local time), epoch ms,
        'now' or mqadmin's yyyy-MM-dd#HH:mm:ss:SSS; None when empty."""
        v = self.text(name)
        if not v:
            return None
        try:
            return parse_timestamp(v)
        except argparse.ArgumentTypeError as e:
            raise BadInput(f"{label}: {e}") from None


async def _form(request: Request) -> Form:
    body = (await request.body()).decode("utf-8", "replace")
    return Form(urllib.parse.parse_qs(body, keep_blank_values=True))


def _query(request: Request) -> Form:
    return Form(urllib.parse.parse_qs(request.url.query, keep_blank_values=True))


def per_second(tps: str | None) -> str | None:
    """A broker's "10s 60s 600s" rates as "a · b · c"; None stays None."""
    if not tps:
        return None
    parts = tps.split()
    try:
        return " · ".join(f"{float(p):,.1f}" for p in parts)
    except ValueError:
        return tps


def percent(ratio: str | None) -> str | None:
    """commitLogDiskRatio (0..1) as a percentage; None stays None."""
    if not ratio:
        return None
    try:
        return f"{float(ratio) * 100:.1f} %"
    except ValueError:
        return ratio


def _to_local_input(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M")


# -- the app ------------------------------------------------------------------------------


class Dashboard:
    """The routes, over one DashboardService."""

    def __init__(self, service: DashboardService, namesrv: str) -> None:
        self.service = service
        self.namesrv = namesrv
        self.env = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(fmt_time=fmt_time, namesrv=namesrv, q=urllib.parse.quote)
        self.env.filters.update(per_second=per_second, percent=percent)

    def page(self, name: str, request: Request, http_status: int = 200, **ctx: Any) -> HTMLResponse:
        qs = _query(request)
        ctx.setdefault("notice", qs.text("notice"))
        ctx.setdefault("error", qs.text("error"))
        html = self.env.get_template(name).render(request=request, **ctx)
        return HTMLResponse(html, status_code=http_status)

    def error_page(self, request: Request, e: BaseException, title: str) -> HTMLResponse:
        status, text = _status_of(e)
        if status == 500:
            log.exception("dashboard: %s %s failed", request.method, request.url.path)
        return self.page("error.html", request, status, title=title, error=text)

    def routes(self) -> list[BaseRoute]:
        r: list[BaseRoute] = [
            Route("/", self.home),
            Route("/cluster", self._page(self.cluster, "Cluster")),
            Route("/topics", self._page(self.topics, "Topics")),
            Route("/topics", self._action(self.create_topic, "/topics"), methods=["POST"]),
            Route("/topic", self._page(self.topic, "Topic")),
            Route("/topic/delete", self._action(self.delete_topic, "/topics"), methods=["POST"]),
            Route("/topic/send", self._action(self.send, "/topic"), methods=["POST"]),
            Route("/groups", self._page(self.groups, "Consumer groups")),
            Route("/group", self._page(self.group, "Consumer group")),
            Route("/group/reset", self._action(self.reset, "/group"), methods=["POST"]),
            Route("/messages", self._page(self.messages, "Messages")),
            Route("/message", self._page(self.message, "Message")),
            Route("/message/resend", self._action(self.resend, "/message"), methods=["POST"]),
            Route(
                "/message/resend-client",
                self._action(self.resend_to_client, "/message"),
                methods=["POST"],
            ),
            Route("/dlq", self._page(self.dlq, "Dead-letter queue")),
            Route("/api/cluster", self._api(lambda q: self.service.cluster_sample())),
            Route("/api/topic", self._api(self.api_topic)),
            Route("/api/group", self._api(self.api_group)),
            Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
        ]
        return r

    def app(self) -> Starlette:
        return Starlette(routes=self.routes())

    # -- wrappers: every failure becomes a message ---------------------------------------------

    def _page(self, render: Handler, title: str) -> Handler:
        async def handler(request: Request) -> Response:
            try:
                return await render(request)
            except Exception as e:
                return self.error_page(request, e, title)

        return handler

    def _action(self, act: Callable[[Form], Awaitable[tuple[str, str]]], back: str) -> Handler:
        """POST: run, then redirect to (page, notice); a failure redirects
        back to the page the form was on (its Referer) with the error."""

        async def handler(request: Request) -> Response:
            origin = request.headers.get("origin")
            if origin and urllib.parse.urlsplit(origin).netloc != request.headers.get("host"):
                return self.page(
                    "error.html", request, 403, title="Refused", error="cross-site form refused"
                )
            referer = request.headers.get("referer") or back
            try:
                form = await _form(request)
                url, notice = await act(form)
                return _redirect(url, notice=notice)
            except Exception as e:
                status, text = _status_of(e)
                if status == 500:
                    log.exception("dashboard: POST %s failed", request.url.path)
                return _redirect(referer, error=text)

        return handler

    def _api(self, get: Callable[[Form], Awaitable[Any]]) -> Handler:
        async def handler(request: Request) -> Response:
            try:
                return JSONResponse(as_json(await get(_query(request))))
            except Exception as e:
                status, text = _status_of(e)
                if status == 500:
                    log.exception("dashboard: GET %s failed", request.url.path)
                return JSONResponse({"error": text}, status_code=status)

        return handler

    # -- pages ---------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/cluster", status_code=302)

    async def cluster(self, request: Request) -> Response:
        brokers = await self.service.cluster()
        return self.page("cluster.html", request, brokers=brokers, title="Cluster")

    async def topics(self, request: Request) -> Response:
        topics = await self.service.topics()
        show_system = _query(request).text("system") == "1"
        return self.page(
            "topics.html", request, topics=topics, show_system=show_system, title="Topics"
        )

    async def topic(self, request: Request) -> Response:
        name = _query(request).required("name", "topic")
        route, status = await self.service.topic(name)
        return self.page("topic.html", request, topic=name, route=route, status=status, title=name)

    async def groups(self, request: Request) -> Response:
        groups = await self.service.groups()
        return self.page("groups.html", request, groups=groups, title="Consumer groups")

    async def group(self, request: Request) -> Response:
        """Its online clients and subscriptions (the consumer connection),
        its topics and lag (the consume stats, over every topic it has
        offsets of, or `topic`), and the offset reset of one topic."""
        q = _query(request)
        group = q.required("name", "consumer group")
        topic = q.text("topic")
        conn = await self.service.connection(group)
        subscribed = sorted((conn or {}).get("subscriptionTable") or {})
        progress, hint, status, error = None, "", 200, q.text("error")
        try:
            progress = await self.service.progress(group, topic)
        except ClientError as e:
            if topic:
                raise
            if conn is None:  # nothing known of it: ask for the topic it consumes
                status, error = 400, str(e)
            else:  # online, no offset yet: its subscriptions name the topics
                hint = f"{e}; pick one of the topics it subscribes to"
        known = sorted(set(subscribed) | set(progress.topics if progress else []))
        resettable = [t for t in known if not t.startswith(RETRY_GROUP_TOPIC_PREFIX)]
        return self.page(
            "group.html",
            request,
            status,
            error=error,
            group=group,
            topic=topic,
            reset_topic=topic or (resettable[0] if len(resettable) == 1 else ""),
            topics=known,
            resettable=resettable,
            conn=conn,
            progress=progress,
            hint=hint,
            now=_to_local_input(int(datetime.datetime.now().timestamp() * 1000)),
            title=group,
        )

    async def messages(self, request: Request) -> Response:
        q = _query(request)
        mode = q.text("mode", "time")
        topic, key, msg_id = q.text("topic"), q.text("key"), q.text("msg_id")
        msgs = None
        if mode == "key" and (topic or key):
            msgs = await self.service.by_key(
                q.required("topic"), q.required("key"), q.number("limit", 64, "limit")
            )
        elif mode == "id" and msg_id:
            msgs = await self.service.by_id(msg_id, topic)
        elif mode == "time" and topic:
            msgs = await self.service.by_time(
                topic,
                q.time("begin", "begin"),
                q.time("end", "end"),
                q.number("limit", 64, "limit"),
            )
        return self.page("messages.html", request, mode=mode, form=q, msgs=msgs, title="Messages")

    async def message(self, request: Request) -> Response:
        q = _query(request)
        msg = await self.service.at_offset(
            q.required("topic"),
            q.required("broker"),
            q.number("queue", label="queue id"),
            q.number("offset", label="queue offset"),
        )
        group = q.text("group")
        if not group and msg.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            group = msg.topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
        # the clients a resend can push the message to (none: no form)
        conn, why = None, ""
        try:
            conn = await self.service.connection(group) if group else None
        except (BrokerError, RemotingError, TimeoutError) as e:
            why = _status_of(e)[1]
        clients = sorted(
            (c for c in (conn or {}).get("connectionSet") or []), key=lambda c: str(c["clientId"])
        )
        return self.page(
            "message.html",
            request,
            msg=msg,
            data=message_as_dict(msg),
            group=q.text("group"),
            client_group=group,
            clients=clients,
            clients_error=why,
            title=f"Message {msg.msg_id}",
        )

    async def dlq(self, request: Request) -> Response:
        q = _query(request)
        group = q.text("group")
        msgs = None
        notice = q.text("notice")
        if group:
            try:
                msgs = await self.service.dlq(group, q.number("limit", 64, "limit"))
            except TopicNotExistError:
                msgs, notice = [], f"{dlq_topic(group)} does not exist: {group} has no dead letters"
        topics = await self.service.topics()
        return self.page(
            "dlq.html",
            request,
            group=group,
            dlq=dlq_topic(group) if group else "",
            msgs=msgs,
            topics=topics,
            notice=notice,
            title="Dead-letter queue",
        )

    # -- actions ----------------------------------------------------------------------------

    async def create_topic(self, f: Form) -> tuple[str, str]:
        name = f.required("topic", "topic name")
        created = await self.service.create_topic(
            name,
            f.number("read_queues", 8, "read queues"),
            f.number("write_queues", 8, "write queues"),
            f.number("perm", 6, "perm"),
            f.text("order") in ("1", "on", "true"),
        )
        return (
            _url("/topic", name=name),
            f"topic {name} created/updated on {', '.join(created.brokers)}",
        )

    async def delete_topic(self, f: Form) -> tuple[str, str]:
        name = f.required("topic")
        if f.text("confirm") != name:
            raise BadInput(f"type the topic's name ({name}) to confirm its deletion")
        deleted = await self.service.delete_topic(name)
        return "/topics", f"topic {name} deleted from {', '.join(deleted.brokers)}"

    async def send(self, f: Form) -> tuple[str, str]:
        topic = f.required("topic")
        r = await self.service.send(topic, f.text("body"), f.text("tags"), f.text("keys"))
        d = send_result_as_dict(r)
        return (
            _url("/topic", name=topic),
            f"{d['sendStatus']}: msgId {d['msgId']} to {d['brokerName']} queue {d['queueId']} "
            f"offset {d['queueOffset']}",
        )

    async def reset(self, f: Form) -> tuple[str, str]:
        group, topic = f.required("group", "consumer group"), f.required("topic")
        if f.text("skip"):
            ts = -1
        else:
            t = f.time("time", "time")
            if t is None:
                raise BadInput("give the time to reset the offsets to")
            ts = t
        r = await self.service.reset_offset(group, topic, ts)
        moved = sum(1 for q in r.queues if q.old_offset != q.new_offset)
        what = "skipped the backlog" if ts < 0 else f"reset to {fmt_time(ts)}"
        return (
            _url("/group", name=group, topic=topic),
            f"{group} on {topic}: {what}; {moved} of {len(r.queues)} queue offset(s) moved",
        )

    async def resend(self, f: Form) -> tuple[str, str]:
        topic = f.required("topic")
        dest, r = await self.service.resend(
            topic,
            f.required("broker"),
            f.number("queue", label="queue id"),
            f.number("offset", label="queue offset"),
            f.text("group"),
            f.text("target", "retry"),
        )
        return (
            _message_url(f),
            f"resent to {dest}: {r.send_status.name}, new msgId {r.msg_id}",
        )

    async def resend_to_client(self, f: Form) -> tuple[str, str]:
        topic, client_id = f.required("topic"), f.required("client", "online client")
        group, r = await self.service.resend_to_client(
            topic,
            f.required("broker"),
            f.number("queue", label="queue id"),
            f.number("offset", label="queue offset"),
            f.text("group"),
            client_id,
        )
        shown = f"{r.get('consumeResult')} in {r.get('spentTimeMills')} ms"
        if r.get("remark"):
            shown += f" ({r['remark']})"
        flags = {k: r[k] for k in ("order", "autoCommit") if k in r}
        if flags:
            shown += "; " + json.dumps(flags)
        return (
            _message_url(f, "group"),
            f"consumed by {client_id} of {group}: {shown}",
        )

    # -- JSON for the charts ----------------------------------------------------------------

    async def api_topic(self, q: Form) -> Any:
        return await self.service.topic_sample(q.required("name", "topic"))

    async def api_group(self, q: Form) -> Any:
        return await self.service.progress_sample(q.required("name", "group"), q.text("topic"))


def _url(path: str, **params: str) -> str:
    return path + "?" + urllib.parse.urlencode(params) if params else path


def _message_url(f: Form, *more: str) -> str:
    """The message page of the message a form acted on (topic, broker,
    queue, offset, and the `more` fields)."""
    fields = ("topic", "broker", "queue", "offset", *more)
    return _url("/message", **{k: f.text(k) for k in fields})


def _redirect(url: str, **params: str) -> RedirectResponse:
    """url with `params` replacing any notice/error it already carries."""
    parts = urllib.parse.urlsplit(url)
    query = [
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if k not in ("notice", "error")
    ]
    query += [(k, v) for k, v in params.items() if v]
    target = urllib.parse.urlunsplit(("", "", parts.path, urllib.parse.urlencode(query), ""))
    return RedirectResponse(target, status_code=303)


def create_app(service: DashboardService, namesrv: str) -> Starlette:
    return Dashboard(service, namesrv).app()
