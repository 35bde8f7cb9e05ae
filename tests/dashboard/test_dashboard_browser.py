"""`pyrmq dashboard` in headless chromium: every page loads without console
errors, and a user's actions work end to end against a real broker: create
a topic, send a message, find it by key, reset a group's offsets, resend a
dead letter to its group. Waits are bounded and watch progress (the
machine is shared and slow); Playwright's own waits get a minute."""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import re
import subprocess
import sys
import time
import urllib.parse
from typing import Any

from pyrmq.admin import AdminClient
from pyrmq.common.errors import TopicNotExistError
from pyrmq.common.message import MessageExt
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from tests._waiting import wait_until
from tests.dashboard.conftest import DashboardProcess, browser_page, screenshot_paths

#: the whole of one browser test, seconds (each step inside is bounded too)
TEST_TIMEOUT = 280.0


def q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


#: tries of one screenshot: headless chromium starved of CPU sometimes
#: answers captureScreenshot with "Unable to capture screenshot" (no frame
#: was ready in time); a page that renders is captured on a later try
SCREENSHOT_TRIES = 3


async def shoot(page: Any, tmp_path: pathlib.Path, name: str) -> None:
    from playwright.async_api import Error as PlaywrightError

    for path in screenshot_paths(tmp_path, name):
        for attempt in range(1, SCREENSHOT_TRIES + 1):
            try:
                await page.screenshot(path=str(path))
                break
            except PlaywrightError as e:
                if "Unable to capture screenshot" not in str(e) or attempt == SCREENSHOT_TRIES:
                    raise
                await asyncio.sleep(1.0)


async def visit(page: Any, url: str) -> Any:
    resp = await page.goto(url)
    assert resp is not None and resp.status < 400, f"{url}: HTTP {resp and resp.status}"
    return resp


async def notice(page: Any) -> str:
    box = page.locator("p.notice, p.error")
    await box.first.wait_for()
    text: str = await box.first.inner_text()
    return text


# -- pages ------------------------------------------------------------------------------------


def test_every_page_loads_without_console_errors(
    arun: Any, dashboard: DashboardProcess, standalone: Any, tmp_path: pathlib.Path
) -> None:
    async def main() -> None:
        async with AdminClient(standalone.namesrv, timeout=10) as admin:
            await admin.create_topic("PagesT", 4, 4)
            for i in range(3):
                await admin.send_message(
                    "PagesT", f"page body {i}", keys=f"pk{i}", broker_name="broker-a", queue_id=0
                )
            # a group with a subscription group config only, one with a retry topic only
            await admin.create_and_update_subscription_group("PagesSubG")
            await admin.create_topic("%RETRY%PagesOrphanG", 1, 1)
        base = dashboard.url
        errors: list[str] = []
        async with browser_page(errors) as page:
            pages = {
                "cluster": "/cluster",
                "topics": "/topics",
                "topics-system": "/topics?system=1",
                "topic": "/topic?name=PagesT",
                "groups": "/groups",
                "group": "/group?name=PagesG&topic=PagesT",
                "messages": "/messages?mode=time&topic=PagesT",
                "messages-key": "/messages?mode=key&topic=PagesT&key=pk1",
                "messages-id": "/messages?mode=id",
                "message": "/message?topic=PagesT&broker=broker-a&queue=0&offset=0",
                "dlq": "/dlq",
            }
            for name, path in pages.items():
                await visit(page, base + path)
                await page.locator("h1").wait_for()
                assert not await page.locator("p.error").count(), (
                    f"{path}: {await page.locator('p.error').inner_text()}"
                )
                if await page.locator("figure.chart").count():
                    # the chart polled its JSON endpoint and drew a sample
                    await page.wait_for_function(
                        "() => [...document.querySelectorAll('figure.chart')]"
                        ".every(f => Number(f.dataset.samples || 0) >= 1)"
                    )
                if name in ("cluster", "topics", "messages", "message"):
                    await shoot(page, tmp_path, name)
            # the broker's put/get rates (10 s, 60 s, 600 s) and disk use
            await visit(page, base + "/cluster")
            rates = re.compile(r"^[\d,.]+ · [\d,.]+ · [\d,.]+$")
            for cell in ("td.put-tps", "td.get-tps"):
                text = await page.locator(cell).first.inner_text()
                assert rates.match(text.strip()), (cell, text)
            assert re.match(r"^\d+\.\d %$", await page.locator("td.disk").first.inner_text())
            # groups: the subscription groups and those with only a retry
            # topic, not RocketMQ's own
            await visit(page, base + "/groups")
            rows = {
                r.split("\t")[0]: r
                for r in await page.locator("#groups tr.group").all_inner_texts()
            }
            assert "broker-a" in rows["PagesSubG"], rows
            assert "no config" in rows["PagesOrphanG"], rows
            assert not {"TOOLS_CONSUMER", "CID_RMQ_SYS_TRANS", "SELF_TEST_C_GROUP"} & set(rows)
            assert not [g for g in rows if g.startswith(("CID_ONSAPI_", "CID_RMQ_SYS_"))], rows
            await shoot(page, tmp_path, "groups")
            # the message page shows its body and properties
            await visit(page, base + pages["messages-key"])
            assert "page body 1" in await page.locator("table.messages").inner_text()
            assert errors == [], errors
            # bad input: a message on the page with a 4xx status, never a
            # traceback (the browser logs each 4xx document as a console error)
            for path, status, text in [
                ("/topic?name=NoSuchTopic", 404, "does not exist"),
                ("/messages?mode=time&topic=PagesT&limit=many", 400, "whole number"),
                ("/message?topic=PagesT&broker=broker-a&queue=0&offset=x", 400, "whole number"),
                ("/group?name=NoRetryGroup", 400, "give the topic"),
            ]:
                resp = await page.goto(base + path)
                assert resp is not None and resp.status == status, path
                assert text in await page.locator("p.error").inner_text(), path
                assert "Traceback" not in await page.content()
            resp = await page.goto(base + "/api/topic?name=NoSuchTopic")
            assert resp is not None and resp.status == 404
            assert "does not exist" in (await resp.json())["error"]
        unexpected = [e for e in errors if "status of 40" not in e]
        assert unexpected == [], unexpected

    arun(main(), timeout=TEST_TIMEOUT)


# -- actions ----------------------------------------------------------------------------------


def test_create_topic_send_and_find_by_key(
    arun: Any, dashboard: DashboardProcess, standalone: Any, tmp_path: pathlib.Path
) -> None:
    async def main() -> None:
        base, topic, key = dashboard.url, "DashCreated", f"key-{int(time.time())}"
        errors: list[str] = []
        async with browser_page(errors) as page:
            await visit(page, base + "/topics")
            form = page.locator("#create-topic")
            await form.locator("input[name=topic]").fill(topic)
            await form.locator("input[name=read_queues]").fill("2")
            await form.locator("input[name=write_queues]").fill("2")
            await form.locator("button[type=submit]").click()
            await page.wait_for_url(re.compile(r"/topic\?name=DashCreated"))
            assert f"topic {topic} created" in await notice(page)
            assert await page.locator("#queue-offsets tbody tr").count() == 2

            # update it from its own page: 3 queues
            upd = page.locator("#update-topic")
            await upd.locator("input[name=read_queues]").fill("3")
            await upd.locator("input[name=write_queues]").fill("3")
            await upd.locator("button[type=submit]").click()
            assert f"topic {topic} created/updated" in await notice(page)
            assert await page.locator("#queue-offsets tbody tr").count() == 3

            # malformed form values come back as an error line on the page
            await visit(page, base + "/topics")
            await form.locator("input[name=topic]").fill("Another")
            await form.locator("input[name=read_queues]").fill("lots")
            await form.locator("button[type=submit]").click()
            await page.wait_for_url(re.compile(r"/topics\?error="))
            assert "read queues must be a whole number" in await notice(page)

            await visit(page, base + f"/topic?name={topic}")
            send = page.locator("#send-message")
            await send.locator("input[name=tags]").fill("TagD")
            await send.locator("input[name=keys]").fill(key)
            await send.locator("textarea[name=body]").fill("hello from the dashboard")
            await send.locator("button[type=submit]").click()
            assert (await notice(page)).startswith("SEND_OK")

            # the broker indexes the key a moment after the send: search again
            # until it is found, bounded (the search itself is the progress)
            url = base + f"/messages?mode=key&topic={topic}&key={q(key)}"
            tries = 0

            async def found() -> bool:
                nonlocal tries
                tries += 1
                await visit(page, url)
                return await page.locator("tr.message").count() == 1

            await wait_until(found, "the message found by its key", stall_after=60, step=0.5)
            row = page.locator("tr.message")
            assert "hello from the dashboard" in await row.inner_text()
            await shoot(page, tmp_path, "query-by-key")
            await row.locator("a").first.click()
            await page.locator("#message-body").wait_for()
            assert await page.locator("#message-body").inner_text() == "hello from the dashboard"
            props = await page.locator("#message-properties").inner_text()
            assert "TagD" in props and key in props
            # and by its message id
            msg_id = (await page.locator("#message-detail").inner_text()).split("msgId")[1]
            msg_id = msg_id.split()[0]
            await visit(page, base + f"/messages?mode=id&topic={topic}&msg_id={msg_id}")
            assert await page.locator("tr.message").count() == 1
            async with AdminClient(dashboard_namesrv(dashboard), timeout=10) as admin:
                route = await admin.topic_route(topic)
                assert [qd.read_queue_nums for qd in route.queue_datas] == [3]

                # delete it: refused until its name is typed, then gone
                await visit(page, base + f"/topic?name={topic}")
                delete = page.locator("#delete-topic")
                await delete.locator("input[name=confirm]").fill("wrong")
                await delete.locator("button[type=submit]").click()
                assert "to confirm its deletion" in await notice(page)
                assert topic in await admin.topic_list()
                await page.locator("#delete-topic input[name=confirm]").fill(topic)
                await page.locator("#delete-topic button[type=submit]").click()
                await page.wait_for_url(re.compile(r"/topics\?notice="))
                assert f"topic {topic} deleted" in await notice(page)
                assert topic not in await page.locator("ul.topics").first.inner_text()
                assert topic not in await admin.topic_list()
        assert errors == [], errors

    arun(main(), timeout=TEST_TIMEOUT)


def dashboard_namesrv(d: DashboardProcess) -> str:
    args = d.proc.args
    assert isinstance(args, list)
    return str(args[args.index("-n") + 1])


def test_reset_offset_by_time_and_skip_backlog(
    arun: Any, dashboard: DashboardProcess, standalone: Any
) -> None:
    async def main() -> None:
        topic, group, n = "ResetT", "ResetG", 5
        async with AdminClient(standalone.namesrv, timeout=10) as admin:
            await admin.create_topic(topic, 2, 2)
            for i in range(n):
                await admin.send_message(topic, f"m{i}")

            async def lag() -> int:
                return (await admin.consumer_progress(group, topic)).diff_total

            errors: list[str] = []
            async with browser_page(errors) as page:
                await visit(page, dashboard.url + f"/group?name={group}&topic={topic}")
                assert (await page.locator("#lag-total").inner_text()) == str(n)
                await page.locator("#skip-backlog").click()
                assert "skipped the backlog" in await notice(page)
                assert await lag() == 0
                assert (await page.locator("#lag-total").inner_text()) == "0"

                before = datetime.datetime.now() - datetime.timedelta(minutes=10)
                form = page.locator("#reset-offset")
                await form.locator("input[name=time]").fill(before.strftime("%Y-%m-%dT%H:%M"))
                await form.locator("button[name=reset]").click()
                assert "reset to" in await notice(page)
                assert await lag() == n
                assert (await page.locator("#lag-total").inner_text()) == str(n)
            assert errors == [], errors

    arun(main(), timeout=TEST_TIMEOUT)


def test_dlq_message_resent_to_its_group(
    arun: Any, dashboard: DashboardProcess, standalone: Any, tmp_path: pathlib.Path
) -> None:
    """A consumer that fails a message until told otherwise sends it, after
    max_reconsume_times retries, to %DLQ%<group>; the DLQ page lists it and
    its resend button delivers it to the group again, under its topic."""

    async def main() -> None:
        topic, group = "DlqT", "DlqG"
        failing = True
        seen: list[MessageExt] = []
        ok: list[MessageExt] = []

        async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                seen.append(m)
                if failing:
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER
                ok.append(m)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        async with AdminClient(standalone.namesrv, timeout=10) as admin:
            await admin.create_topic(topic, 1, 1)
            consumer = PushConsumer(
                group,
                standalone.namesrv,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                max_reconsume_times=1,
                rebalance_interval=1.0,
            )
            consumer.subscribe(topic, "*")
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                await admin.send_message(topic, "poison", keys="poison-key")

                async def dead_letters() -> int:
                    try:
                        return len(await admin.consume_message("%DLQ%" + group, 8))
                    except TopicNotExistError:
                        return 0

                await wait_until(
                    lambda: _ge(dead_letters(), 1),
                    "the failed message in the DLQ",
                    progress=lambda: len(seen),
                    stall_after=60,
                    step=0.5,
                )
                failing = False
                errors: list[str] = []
                async with browser_page(errors) as page:
                    # the group is listed from its subscription group config
                    await visit(page, dashboard.url + "/groups")
                    names = await page.locator("#groups tr.group td:first-child").all_inner_texts()
                    assert group in names, names
                    await page.locator("#groups a", has_text=re.compile(f"^{group}$")).click()
                    await page.wait_for_url(re.compile(r"/group\?name=DlqG$"))
                    # its online client, subscriptions and topics, no topic typed
                    cid = consumer.client.client_id
                    clients = await page.locator("#clients tr.client").all_inner_texts()
                    assert len(clients) == 1 and clients[0].startswith(cid), clients
                    assert "PYTHON" in clients[0], clients
                    assert "CONSUME_PASSIVELY" in clients[0] and "CLUSTERING" in clients[0]
                    subs = await page.locator("#subscriptions").inner_text()
                    assert topic in subs and f"%RETRY%{group}" in subs, subs
                    assert topic in await page.locator("#group-topics").inner_text()
                    assert await page.locator("#progress tbody tr").count() >= 1
                    assert await page.locator("#reset-offset input[name=topic]").input_value() == (
                        topic
                    )
                    await visit(page, dashboard.url + "/dlq")
                    await page.locator("#dlq-form input[name=group]").fill(group)
                    await page.locator("#dlq-form button[type=submit]").click()
                    row = page.locator("tr.message")
                    await row.first.wait_for()
                    assert await row.count() == 1
                    assert "poison" in await row.inner_text()
                    await shoot(page, tmp_path, "dlq")
                    await row.locator("a").first.click()
                    await page.locator("#message-body").wait_for()
                    props = await page.locator("#message-properties").inner_text()
                    assert topic in props  # RETRY_TOPIC: where it came from
                    await page.locator("#resend-retry").click()
                    text = await notice(page)
                    assert text.startswith(f"resent to %RETRY%{group}: SEND_OK"), text
                    await wait_until(
                        lambda: bool(ok),
                        "the resent message consumed by its group",
                        progress=lambda: len(seen),
                        stall_after=60,
                        step=0.2,
                    )
                    # and pushed to the online client itself: its verdict is shown
                    await page.locator("#message-body").wait_for()
                    form = page.locator("#resend-client")
                    options = await form.locator("select[name=client] option").all_inner_texts()
                    assert len(options) == 1 and options[0].startswith(cid), options
                    before = len(ok)
                    await form.locator("#resend-to-client").click()
                    text = await notice(page)
                    assert text.startswith(f"consumed by {cid} of {group}: "), text
                    assert "CR_SUCCESS in " in text, text
                    assert len(ok) == before + 1  # consumed before the broker answered
                    assert ok[-1].body == b"poison"
                    await page.locator("#resend-client").scroll_into_view_if_needed()
                    await shoot(page, tmp_path, "message-resend")
                assert errors == [], errors
            finally:
                await consumer.shutdown()
        assert ok[0].body == b"poison"
        assert ok[0].topic == topic
        assert ok[0].keys == ["poison-key"]

    arun(main(), timeout=TEST_TIMEOUT)


async def _ge(value: Any, n: int) -> bool:
    return int(await value) >= n


def test_live_charts_follow_tps_and_lag(
    arun: Any, dashboard: DashboardProcess, standalone: Any, tmp_path: pathlib.Path
) -> None:
    """While messages are sent, the topic page's TPS chart and the group
    page's lag chart (a group nobody consumes for) plot values above 0."""

    async def main() -> None:
        topic, group = "ChartT", "ChartG"
        sent = 0
        async with AdminClient(standalone.namesrv, timeout=10) as admin:
            await admin.create_topic(topic, 2, 2)
            await admin.reset_offset_by_time(group, topic, -1)  # the group starts now
            stop = asyncio.Event()

            async def sender() -> None:
                nonlocal sent
                while not stop.is_set():
                    await admin.send_message(topic, f"tick {sent}")
                    sent += 1
                    await asyncio.sleep(0.05)

            task = asyncio.create_task(sender(), name="test:chart-sender")
            errors: list[str] = []
            try:
                async with browser_page(errors) as page:
                    for path, name in [
                        (f"/topic?name={topic}", "topic"),
                        (f"/group?name={group}&topic={topic}", "group"),
                    ]:
                        await visit(page, dashboard.url + path)
                        chart = page.locator("figure.chart").first
                        await wait_until(
                            lambda c=chart: _chart_ready(c),
                            f"the {name} chart plotting a value above 0 from 3 samples",
                            progress=lambda: sent,
                            stall_after=60,
                            step=0.5,
                        )
                        await shoot(page, tmp_path, name)
            finally:
                stop.set()
                await task
        assert errors == [], errors

    arun(main(), timeout=TEST_TIMEOUT)


async def _chart_ready(chart: Any) -> bool:
    samples = float(await chart.get_attribute("data-samples") or 0)
    last = float(await chart.get_attribute("data-last") or 0)
    return samples >= 3 and last > 0


def test_without_the_web_stack_it_says_what_to_install() -> None:
    """`pyrmq dashboard` where starlette cannot be imported (sys.modules
    holds None for it, as for a module that is not installed): one line
    naming the extra, status 1."""
    code = (
        "import sys\n"
        "sys.modules['starlette'] = None\n"
        "from pyrmq.cli import main\n"
        "sys.exit(main(['dashboard', '-n', '127.0.0.1:1', '--port', '0']))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'pyrmq[dashboard]'" in lines[0], r.stderr
