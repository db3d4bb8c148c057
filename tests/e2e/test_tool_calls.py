#!/usr/bin/env python3
"""Tool calls, reasoning and "nothing silently ignored", end to end.

Unknown parameters: loom-gateway on stories260K with the CPU engine answers OpenAI's
400 for an unknown member and accepts `user`. Tool calls: a copy of stories260K with a
chat template embedded (and the family's marker tokens added to its vocabulary) runs
behind fake_engine.py, which replays the token ids of a recorded tool-call text; the
gateway must return the parsed calls, streamed and not, with logprob lists whose bytes
join to each part's text.
"""
import http.client
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_edit  # noqa: E402
from loomtest import Gateway, GatewayTestCase, ModelCopyTestCase, joined_bytes, main, shared  # noqa: E402

MODEL = shared("models/stories260K.gguf")
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_engine.py")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def error_message(body):
    return body["error"]["message"]


class UnknownParameters(GatewayTestCase):
    gateway_model = MODEL

    chat_body = {"model": "stories260K", "messages": MESSAGES, "max_tokens": 2}

    def test_unknown_member_gets_openais_400(self):
        status, body = self.chat(foo=1)
        self.assertEqual(status, 400)
        self.assertEqual(error_message(body), "Unrecognized request argument supplied: foo")
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        status, body = self.gw.post("/v1/completions", {"model": "stories260K", "prompt": "Once", "foo": 1, "bar": 2})
        self.assertEqual(status, 400)
        self.assertEqual(error_message(body), "Unrecognized request arguments supplied: foo, bar")

    def test_noop_members_are_accepted(self):
        status, body = self.chat(user="user-1234", metadata={"k": "v"}, service_tier="auto", store=False)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.chat(user=5)[0], 400)
        status, body = self.chat(store=True)
        self.assertEqual(status, 400)
        self.assertIn("'store' is only supported at its default (false)", error_message(body))

    def test_what_this_model_or_engine_cannot_honour(self):
        # No chat template: no tool-call syntax, no template kwargs.
        status, body = self.chat(tools=TOOLS)
        self.assertEqual(status, 400)
        self.assertIn("no tool-call syntax", error_message(body))
        self.assertEqual(self.chat(tools=TOOLS, tool_choice="none")[0], 200)
        # Template kwargs are ignored without a template (clients send enable_thinking to
        # every model); reasoning_effort, which asks for something, is refused.
        status, with_kwargs = self.chat(chat_template_kwargs={"enable_thinking": False})
        self.assertEqual(status, 200, with_kwargs)
        self.assertEqual(with_kwargs["usage"]["prompt_tokens"], self.chat()[1]["usage"]["prompt_tokens"])
        status, body = self.chat(reasoning_effort="low")
        self.assertEqual(status, 400)
        self.assertIn("no chat template", error_message(body))
        # The CPU engine announces `grammar`: forced calls and JSON output are served
        # (test_structured_output.py); HermesCalls checks the refusal by an engine without it.


class ReplayCase(ModelCopyTestCase):
    """A gateway on a copy of stories260K with `template` (a shared template file) and
    `tokens` added, behind fake_engine.py replaying the ids of the text set by replay()."""

    source_model = MODEL
    tokens = ()

    @classmethod
    def setUpClass(cls):
        # No SentencePiece space prefix, so that the recorded texts tokenize and decode
        # back byte for byte.
        path, n_vocab = cls.copy_model(add_tokens=cls.tokens,
                                       set_kv={"tokenizer.ggml.add_space_prefix": (gguf_edit.BOOL, False)})
        cls.script = os.path.join(cls.tmp, "script")
        open(cls.script, "w").close()
        cls.gw = Gateway(path, "--engine-arg=--script", "--engine-arg=" + cls.script, "--engine-arg=--n-vocab",
                         "--engine-arg=%d" % n_vocab, engine=FAKE)
        cls.gw.wait_ready()

    def replay(self, text):
        """The fake engine's next outputs are `text`, tokenized by the gateway."""
        status, body = self.gw.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        self.assertEqual(status, 200, body)
        ids = body["tokens"]
        # The ids decode to the text (special tokens aside, which decode to nothing).
        status, back = self.gw.post("/detokenize", {"tokens": ids})
        plain = text
        for t, _ in self.tokens:
            plain = plain.replace(t, "") if _ == gguf_edit.CONTROL else plain
        self.assertEqual(back["prompt"], plain)
        open(self.script, "w").write(",".join(str(t) for t in ids))

    def ask(self, stream=False, **extra):
        body = {"model": self.model_id, "messages": MESSAGES, "tools": TOOLS, "logprobs": True, "top_logprobs": 1}
        body.update(extra)
        return self.completion(dict(body, stream=True) if stream else body)

    def check_spelled(self, choice):
        """Every logprob list of a whole response spells the text it covers."""
        m, lp = choice["message"], choice["logprobs"]
        self.assertEqual(joined_bytes(lp["content"]), (m["content"] or "").encode())
        self.assertEqual(joined_bytes(lp.get("reasoning_content", [])), m.get("reasoning_content", "").encode())
        calls = m.get("tool_calls", [])
        self.assertEqual(len(lp.get("tool_calls", [])), len(calls))
        for i, (call, lists) in enumerate(zip(calls, lp.get("tool_calls", []))):
            self.assertEqual(lists["index"], i)
            self.assertEqual(joined_bytes(lists["arguments"]), call["function"]["arguments"].encode())
            self.assertEqual(joined_bytes(lists["name"]), call["function"]["name"].encode())

    def fold_stream(self, chunks):
        """A stream folded into a whole choice; checks each chunk's lists spell its
        delta and each call's first delta is its header."""
        content, reasoning, calls, finish = "", "", [], None
        lp = {"content": [], "reasoning_content": [], "tool_calls": []}
        for c in chunks:
            for ch in c["choices"]:
                d, l = ch["delta"], ch.get("logprobs") or {}
                self.assertEqual(joined_bytes(l.get("content", [])), (d.get("content") or "").encode())
                self.assertEqual(joined_bytes(l.get("reasoning_content", [])), d.get("reasoning_content", "").encode())
                content += d.get("content") or ""
                reasoning += d.get("reasoning_content", "")
                lp["content"] += l.get("content", [])
                lp["reasoning_content"] += l.get("reasoning_content", [])
                for t, tl in zip(d.get("tool_calls", []), l.get("tool_calls", [])):
                    self.assertEqual(t["index"], tl["index"])
                    self.assertEqual(joined_bytes(tl["arguments"]), t["function"]["arguments"].encode())
                    if t["index"] == len(calls):  # the first delta of a call
                        self.assertEqual(t["type"], "function")
                        self.assertEqual(t["function"]["arguments"], "")
                        calls.append({"id": t["id"], "type": "function",
                                      "function": {"name": t["function"]["name"], "arguments": ""}})
                        lp["tool_calls"].append({"index": t["index"], "name": [], "arguments": []})
                    else:
                        self.assertNotIn("id", t)
                    calls[t["index"]]["function"]["arguments"] += t["function"]["arguments"]
                    lp["tool_calls"][t["index"]]["name"] += tl["name"]
                    lp["tool_calls"][t["index"]]["arguments"] += tl["arguments"]
                finish = ch["finish_reason"] or finish
        message = {"role": "assistant", "content": content or (None if calls or reasoning else "")}
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        if not lp["reasoning_content"]:
            del lp["reasoning_content"]
        if not lp["tool_calls"]:
            del lp["tool_calls"]
        return {"message": message, "logprobs": lp, "finish_reason": finish}

    def same_ignoring_ids(self, whole, streamed):
        strip = lambda m: [dict(c, id=None) for c in m.get("tool_calls", [])]
        self.assertEqual(strip(whole["message"]), strip(streamed["message"]))
        for key in ("content", "reasoning_content"):
            self.assertEqual(whole["message"].get(key), streamed["message"].get(key))
        self.assertEqual(whole["finish_reason"], streamed["finish_reason"])
        lp = dict(whole["logprobs"])
        lp.pop("refusal", None)
        self.assertEqual(lp, streamed["logprobs"])

    def both(self, **extra):
        """The whole response and the folded stream, checked and compared."""
        whole = self.ask(**extra)
        self.check_spelled(whole)
        streamed = self.fold_stream(self.ask(stream=True, **extra))
        self.same_ignoring_ids(whole, streamed)
        return whole


class HermesCalls(ReplayCase):
    """Qwen2.5's template; <tool_call> and </tool_call> are user-defined tokens (as in
    Qwen's vocabulary), so they are text."""

    template = "Qwen-Qwen2.5-7B-Instruct.jinja"
    tokens = [("<tool_call>", gguf_edit.USER_DEFINED), ("</tool_call>", gguf_edit.USER_DEFINED),
              ("<|im_start|>", gguf_edit.CONTROL), ("<|im_end|>", gguf_edit.CONTROL)]
    TEXT = ("I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>")

    def test_parsed_calls_streamed_and_not(self):
        self.replay(self.TEXT)
        c = self.both()
        m = c["message"]
        self.assertEqual(c["finish_reason"], "tool_calls")
        self.assertEqual(m["content"], "I'll check.")
        self.assertEqual([(t["function"]["name"], t["function"]["arguments"]) for t in m["tool_calls"]],
                         [("get_weather", "{\"city\": \"Paris\"}"), ("get_time", "{\"tz\": \"CET\"}")])
        ids = [t["id"] for t in m["tool_calls"]]
        for i in ids:
            self.assertRegex(i, r"^call_[A-Za-z0-9]{24}$")
        self.assertEqual(len(set(ids)), 2)
        # The marker tokens are in no list; every other token is in one.
        lp = c["logprobs"]
        listed = lp["content"] + [e for t in lp["tool_calls"] for e in t["name"] + t["arguments"]]
        self.assertNotIn("<tool_call>", [e["token"] for e in listed])

    def test_engine_without_grammar_refuses_forced_output(self):
        # fake_engine.py does not announce `grammar`: forced calls and JSON output get 400.
        self.replay(self.TEXT)
        for extra in ({"tool_choice": "required"},
                      {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
                      {"tools": None, "response_format": {"type": "json_object"}}):
            body = {"model": self.model_id, "messages": MESSAGES, "tools": TOOLS}
            body.update(extra)
            status, body = self.gw.post("/v1/chat/completions", body)
            self.assertEqual(status, 400, extra)
            self.assertIn("grammar", error_message(body))
            self.assertEqual(body["error"]["code"], "unsupported_by_engine")

    def test_one_call_when_parallel_calls_are_off(self):
        self.replay(self.TEXT)
        c = self.both(parallel_tool_calls=False)
        self.assertEqual(len(c["message"]["tool_calls"]), 1)
        self.assertEqual(c["finish_reason"], "tool_calls")

    def test_no_tools_or_tool_choice_none_is_plain_content(self):
        self.replay(self.TEXT)
        for extra in ({"tools": None}, {"tool_choice": "none"}):
            c = self.both(**extra)
            self.assertEqual(c["message"]["content"], self.TEXT)
            self.assertNotIn("tool_calls", c["message"])
            self.assertEqual(c["finish_reason"], "stop")

    def test_malformed_call_stays_content(self):
        text = "Sure <tool_call>{\"name\": 3}</tool_call>"
        self.replay(text)
        c = self.both()
        self.assertEqual(c["message"]["content"], text)
        self.assertNotIn("tool_calls", c["message"])

    def test_cut_by_max_tokens(self):
        self.replay(self.TEXT)
        status, body = self.gw.post("/tokenize", {"prompt": self.TEXT, "add_special_tokens": False})
        c = self.both(max_tokens=body["count"] - 12)
        self.assertEqual(c["finish_reason"], "length")
        self.assertEqual(len(c["message"]["tool_calls"]), 2)
        self.assertTrue("{\"tz\": \"CET\"}".startswith(c["message"]["tool_calls"][1]["function"]["arguments"]))

    def test_a_cut_call_is_never_content(self):
        # Issue 40, item 2: at every max_tokens, the envelope of a cut call (`<tool_ca`,
        # `<tool_call>\n{"name": "get_time", "arguments`) is neither content nor a content
        # delta: the call is a call once its name is complete (empty arguments), else dropped.
        self.replay(self.TEXT)
        status, body = self.gw.post("/tokenize", {"prompt": self.TEXT, "add_special_tokens": False})
        want = [("get_weather", "{\"city\": \"Paris\"}"), ("get_time", "{\"tz\": \"CET\"}")]
        named_only = 0
        for n in range(1, body["count"]):
            c = self.both(max_tokens=n)  # streamed and not alike; every list spells its part
            self.assertEqual(c["finish_reason"], "length")
            content = c["message"]["content"] or ""
            self.assertTrue("I'll check.".startswith(content), (n, content))
            calls = [(t["function"]["name"], t["function"]["arguments"]) for t in c["message"].get("tool_calls", [])]
            for (name, args), (want_name, want_args) in zip(calls, want):
                self.assertEqual(name, want_name, n)
                self.assertTrue(want_args.startswith(args), (n, args))
            named_only += bool(calls) and calls[-1][1] == ""
        self.assertGreater(named_only, 1)  # cuts between a name and its arguments gave calls


    # -- the Responses API: the same calls as function_call output items ----------------

    RESPONSES_TOOLS = [dict(t["function"], type="function") for t in TOOLS]

    def responses_events(self, body):
        """POSTs a streamed /v1/responses body; returns its events' data, in order."""
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=120)
        conn.request("POST", "/v1/responses", body=json.dumps(dict(body, stream=True)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        events = []
        for block in resp.read().decode("utf-8").split("\n\n"):
            if block.strip():
                name, data = block.split("\n", 1)
                self.assertEqual(name, "event: " + json.loads(data[len("data: "):])["type"])
                events.append(json.loads(data[len("data: "):]))
        conn.close()
        return events

    def test_responses_function_call_items(self):
        self.replay(self.TEXT)
        body = {"model": self.model_id, "input": MESSAGES[0]["content"], "tools": self.RESPONSES_TOOLS}
        status, r = self.gw.post("/v1/responses", body)
        self.assertEqual(status, 200, r)
        self.assertEqual(r["status"], "completed")
        self.assertEqual([o["type"] for o in r["output"]], ["message", "function_call", "function_call"])
        self.assertEqual(r["output"][0]["content"][0]["text"], "I'll check.")
        calls = r["output"][1:]
        self.assertEqual([(c["name"], c["arguments"], c["status"]) for c in calls],
                         [("get_weather", "{\"city\": \"Paris\"}", "completed"),
                          ("get_time", "{\"tz\": \"CET\"}", "completed")])
        for c in calls:
            self.assertRegex(c["call_id"], r"^call_[A-Za-z0-9]{24}$")
            self.assertTrue(c["id"].startswith("fc_"))
        self.assertEqual(r["tools"], self.RESPONSES_TOOLS)
        self.assertEqual(r["tool_choice"], "auto")

        # Streamed: each item added, its deltas, done; the final object equals the whole one
        # (call ids aside, which are fresh per response).
        events = self.responses_events(body)
        self.assertEqual([e["sequence_number"] for e in events], list(range(len(events))))
        kinds = [e["type"] for e in events]
        self.assertEqual(kinds.count("response.output_item.added"), 3)
        self.assertEqual(kinds.count("response.output_item.done"), 3)
        self.assertEqual(kinds.count("response.function_call_arguments.done"), 2)
        self.assertEqual(kinds[-1], "response.completed")
        args = {}
        for e in events:
            if e["type"] == "response.function_call_arguments.delta":
                args[e["output_index"]] = args.get(e["output_index"], "") + e["delta"]
            if e["type"] == "response.function_call_arguments.done":
                self.assertEqual(e["arguments"], args[e["output_index"]])
        self.assertEqual(args, {1: "{\"city\": \"Paris\"}", 2: "{\"tz\": \"CET\"}"})
        strip = lambda out: [dict(o, call_id=None, id=None) for o in out]
        self.assertEqual(strip(events[-1]["response"]["output"]), strip(r["output"]))

        # The calls and their results sent back as input items render as the chat does.
        turn = [{"type": "function_call", "call_id": c["call_id"], "name": c["name"], "arguments": c["arguments"]}
                for c in calls]
        results = [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in calls]
        st, again = self.gw.post("/v1/responses", dict(body, input=[{"role": "user", "content": "Hi"}] + turn + results,
                                                       max_output_tokens=1))
        self.assertEqual(st, 200, again)
        chat_msgs = [{"role": "user", "content": "Hi"},
                     {"role": "assistant", "tool_calls": [
                         {"id": c["call_id"], "type": "function",
                          "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}] + [
            {"role": "tool", "tool_call_id": c["call_id"], "content": "sunny"} for c in calls]
        st, tok = self.gw.post("/tokenize", {"messages": chat_msgs, "tools": TOOLS})
        self.assertEqual(st, 200, tok)
        self.assertEqual(again["usage"]["input_tokens"], tok["count"])


class HarmonyChannels(ReplayCase):
    """gpt-oss's template; the harmony markers are control tokens (no text in chat)."""

    template = "openai-gpt-oss-120b.jinja"
    tokens = [(t, gguf_edit.CONTROL) for t in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>",
                                                "<|return|>", "<|constrain|>")]

    def test_reasoning_and_a_call(self):
        self.replay("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                    "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}")
        c = self.both(reasoning_effort="low")
        m = c["message"]
        self.assertEqual(m["reasoning_content"], "Need the weather.")
        self.assertIsNone(m["content"])
        self.assertEqual([(t["function"]["name"], t["function"]["arguments"]) for t in m["tool_calls"]],
                         [("get_weather", "{\"city\":\"Paris\"}")])
        self.assertEqual(c["finish_reason"], "tool_calls")
        for e in c["logprobs"]["reasoning_content"]:
            self.assertIsNotNone(e["bytes"])  # the control tokens went to no part

    def test_all_reasoning_leaves_content_null(self):
        # Issue 40, item 7: as for a tool-only answer, content is null, not "".
        self.replay("<|channel|>analysis<|message|>Still thinking about the weather")
        c = self.both()
        self.assertIsNone(c["message"]["content"])
        self.assertEqual(c["message"]["reasoning_content"], "Still thinking about the weather")
        self.assertEqual(c["logprobs"]["content"], [])

    def test_final_channel_is_content(self):
        self.replay("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.")
        c = self.both()
        self.assertEqual(c["message"]["reasoning_content"], "Easy.")
        self.assertEqual(c["message"]["content"], "Hi there.")
        self.assertNotIn("tool_calls", c["message"])
        self.assertEqual(c["finish_reason"], "stop")

    def test_template_kwargs_it_does_not_read(self):
        # gpt-oss's template never reads enable_thinking: the key is ignored (as vLLM and
        # transformers ignore it), the prompt is the one without it.
        # (/tokenize renders exactly as chat does.)
        counts = []
        for kwargs in ({"enable_thinking": True}, None):
            body = {"messages": MESSAGES}
            if kwargs:
                body["chat_template_kwargs"] = kwargs
            status, body = self.gw.post("/tokenize", body)
            self.assertEqual(status, 200, body)
            counts.append(body["tokens"])
        self.assertEqual(counts[0], counts[1])


class MistralSplitMarkers(ReplayCase):
    """Mistral Small 3.2's template with no tokens added: [TOOL_CALLS] and [ARGS] are
    spelled by several ordinary tokens, so tokens straddle the part boundaries."""

    template = "Mistral-Small-3.2-24B-Instruct-2506.jinja"

    def test_markers_across_tokens(self):
        self.replay("Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}")
        c = self.both()
        m = c["message"]
        self.assertEqual(m["content"], "Checking.")
        self.assertEqual([(t["function"]["name"], t["function"]["arguments"]) for t in m["tool_calls"]],
                         [("get_weather", "{\"city\": \"Paris\"}"), ("get_time", "{\"tz\": \"CET\"}")])
        for t in m["tool_calls"]:
            self.assertRegex(t["id"], r"^[A-Za-z0-9]{9}$")


class TokenizeRendersAsChat(ModelCopyTestCase):
    """/tokenize with `messages` counts what chat renders, template kwargs included: a copy
    of stories260K with Qwen3's template (which reads `enable_thinking`) and the CPU engine."""

    source_model = MODEL
    template = "Qwen-Qwen3-0.6B.jinja"
    model_id = "qwen3-copy"

    def counts(self, **extra):
        st, tok = self.gw.post("/tokenize", dict(messages=MESSAGES, **extra))
        self.assertEqual(st, 200, tok)
        st, chat = self.gw.post("/v1/chat/completions", dict(messages=MESSAGES, max_tokens=1, **extra))
        self.assertEqual(st, 200, chat)
        return tok["count"], chat["usage"]["prompt_tokens"]

    def test_template_kwargs_count(self):
        plain = self.counts()
        self.assertEqual(plain[0], plain[1])
        # enable_thinking=false makes Qwen3's generation prompt an empty think block.
        off = self.counts(chat_template_kwargs={"enable_thinking": False})
        self.assertEqual(off[0], off[1])
        self.assertGreater(off[0], plain[0])
        tools = self.counts(tools=TOOLS)
        self.assertEqual(tools[0], tools[1])
        self.assertGreater(tools[0], plain[0])
        # A kwarg the template never reads is ignored (as vLLM and transformers do): the
        # prompt is the plain one, on both paths.
        ignored = self.counts(chat_template_kwargs={"no_such_key": 1})
        self.assertEqual(ignored, plain)
        mixed = self.counts(chat_template_kwargs={"no_such_key": 1, "enable_thinking": False})
        self.assertEqual(mixed, off)


if __name__ == "__main__":
    main()
