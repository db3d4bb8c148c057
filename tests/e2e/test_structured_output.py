#!/usr/bin/env python3
"""Structured output end to end: loom-gateway on stories260K with the CPU engine, a model
that cannot follow instructions, so only the grammar can make its output valid.

- 50 chat requests over 10 JSON Schemas (response_format json_schema, sampled at
  temperature 1 with 5 seeds each) all end with finish_reason "stop" and content that
  parses and validates against its schema (a validator of the subset used, below); the
  joined bytes of the logprob entries equal the content.
- logprobs_mode "processed": where a top_logprobs list holds fewer than 20 entries it is the
  whole allowed set, and its probabilities sum to 1; "raw" keeps the model's distribution
  over the whole vocabulary (the allowed token's raw logprob is below the processed one).
- json_object, guided_choice and guided_regex; tool_choice "required" and a named function
  give tool_calls whose arguments validate; what loom cannot enforce is a 400 naming it.
- With each tool-call family's chat template embedded in a copy of stories260K (Qwen2.5,
  Llama 3.1, Mistral Small 3.2 and Nemo, DeepSeek V3.1 and R1, Granite 3.3, Command R7B,
  gpt-oss), forced calls (required, named; streamed and not) are written in the family's own
  syntax (the tagged_json grammar; checked on the generated ids, detokenized) and parsed by
  the family's parser into tool_calls whose arguments validate, the logprob lists spelling
  each call's name and arguments. (After reasoning, with thinking on: test_structured_reasoning.py.)
"""
import json
import math
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_edit  # noqa: E402
from loomtest import Gateway, GatewayTestCase, ModelCopyTestCase, chat_choices, joined_bytes, main, shared  # noqa: E402

MODEL = shared("models/stories260K.gguf")
MESSAGES = [{"role": "user", "content": "Tell me about a cat."}]

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"],
     "additionalProperties": False},
    {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120},
                                      "alive": {"type": "boolean"}},
     "required": ["age", "alive"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "count": {"const": 3}},
     "required": ["color", "count"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                                               "minItems": 1, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"pet": {"type": "object", "properties": {
        "kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "minimum": 0, "maximum": 8}},
        "required": ["kind", "legs"], "additionalProperties": False}},
     "required": ["pet"], "additionalProperties": False},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer", "minimum": -50, "maximum": 50},
                                                          {"type": "string", "maxLength": 5}, {"type": "null"}]}},
     "required": ["value"], "additionalProperties": False},
    {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["score"], "additionalProperties": False},
    {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99},
                                                          "y": {"type": "integer", "minimum": 0, "maximum": 99}},
                         "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "object", "properties": {"title": {"type": "string", "minLength": 2, "maxLength": 8},
                                      "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                                      "note": {"type": "string", "maxLength": 4}},
     "required": ["title", "year"], "additionalProperties": False},
    {"type": "array", "items": {"enum": [1, 2, 3, "many"]}, "minItems": 2, "maxItems": 4},
]


def resolve(schema, root):
    while "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def validate(v, schema, root, where="$"):
    """Raises AssertionError naming `where` when `v` breaks `schema` (the keywords above)."""
    schema = resolve(schema, root)

    def need(ok, what):
        if not ok:
            raise AssertionError("%s: %s (value %r)" % (where, what, v))

    if "anyOf" in schema:
        errors = []
        for sub in schema["anyOf"]:
            try:
                validate(v, sub, root, where)
                return
            except AssertionError as e:
                errors.append(str(e))
        need(False, "matches no anyOf branch: " + "; ".join(errors))
    if "enum" in schema:
        need(any(v == e and type(v) is type(e) for e in schema["enum"]), "not in enum")
    if "const" in schema:
        need(v == schema["const"] and type(v) is type(schema["const"]), "not the const")
    t = schema.get("type")
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if t in kinds:
        need(isinstance(v, kinds[t]), "not of type " + t)
    elif t == "integer":
        need(isinstance(v, int) and not isinstance(v, bool), "not an integer")
    elif t == "number":
        need(isinstance(v, (int, float)) and not isinstance(v, bool), "not a number")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        need(v >= schema.get("minimum", -math.inf), "below minimum")
        need(v <= schema.get("maximum", math.inf), "above maximum")
    if isinstance(v, str):
        need(len(v) >= schema.get("minLength", 0), "shorter than minLength")
        need(len(v) <= schema.get("maxLength", 1 << 30), "longer than maxLength")
    if isinstance(v, list):
        need(len(v) >= schema.get("minItems", 0), "fewer than minItems")
        need(len(v) <= schema.get("maxItems", 1 << 30), "more than maxItems")
        for i, x in enumerate(v):
            if "items" in schema:
                validate(x, schema["items"], root, "%s[%d]" % (where, i))
    if isinstance(v, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            need(k in v, "lacks required " + k)
        if schema.get("additionalProperties") is False:
            need(set(v) <= set(props), "has properties outside " + ",".join(props))
        for k, x in v.items():
            if k in props:
                validate(x, props[k], root, where + "." + k)


class StructuredOutput(GatewayTestCase):
    gateway_model = MODEL

    chat_body = {"model": "stories260K", "messages": MESSAGES, "max_tokens": 400}

    def check_entries(self, choice):
        content = choice["message"]["content"]
        self.assertEqual(joined_bytes(choice["logprobs"]["content"]), content.encode("utf-8"))

    def test_fifty_requests_over_ten_schemas_validate(self):
        small_lists = 0
        for k, schema in enumerate(SCHEMAS):
            for seed in range(5):
                mode = "processed" if seed % 2 == 0 else "raw"
                status, body = self.chat(
                    seed=1000 * k + seed, temperature=1, logprobs=True, top_logprobs=20, logprobs_mode=mode,
                    response_format={"type": "json_schema",
                                     "json_schema": {"name": "s%d" % k, "strict": True, "schema": schema}})
                self.assertEqual(status, 200, body)
                c = body["choices"][0]
                where = "schema %d seed %d: %r" % (k, seed, c["message"]["content"])
                self.assertEqual(c["finish_reason"], "stop", where)
                validate(json.loads(c["message"]["content"]), schema, schema)
                self.check_entries(c)
                if mode == "processed":
                    for e in c["logprobs"]["content"]:
                        top = e["top_logprobs"]
                        self.assertIn(e["token"], [t["token"] for t in top] if len(top) < 20 else [e["token"]])
                        if len(top) < 20:  # the whole allowed set
                            small_lists += 1
                            self.assertAlmostEqual(sum(math.exp(t["logprob"]) for t in top), 1.0, places=4, msg=where)
        self.assertGreater(small_lists, 50)  # the sums above were checked, many times

    def test_raw_logprobs_are_the_models_whole_distribution(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMAS[2]}}
        got = {}
        for mode in ("raw", "processed"):
            status, body = self.chat(seed=7, temperature=1, logprobs=True, top_logprobs=5, logprobs_mode=mode,
                                     response_format=fmt)
            self.assertEqual(status, 200, body)
            got[mode] = body["choices"][0]
        # Same seed and grammar: the same tokens; the first ('{', forced) is certain after
        # renormalising, but the model alone does not give it probability 1.
        self.assertEqual(got["raw"]["message"]["content"], got["processed"]["message"]["content"])
        raw, proc = got["raw"]["logprobs"]["content"], got["processed"]["logprobs"]["content"]
        self.assertEqual(proc[0]["logprob"], 0.0)
        self.assertLess(raw[0]["logprob"], -0.01)
        for r, p in zip(raw, proc):
            self.assertLessEqual(r["logprob"], p["logprob"] + 1e-5)
        # Raw top lists range over the whole vocabulary: somewhere a token the grammar forbids
        # (at the first step only '{' and nothing else is allowed) is among them.
        self.assertEqual(len(raw[0]["top_logprobs"]), 5)
        self.assertEqual(len(proc[0]["top_logprobs"]), 1)

    def test_json_object_choice_and_regex(self):
        status, body = self.chat(seed=3, response_format={"type": "json_object"}, max_tokens=1000,
                                 logprobs=True)
        self.assertEqual(status, 200, body)
        c = body["choices"][0]
        if c["finish_reason"] == "stop":
            self.assertIsInstance(json.loads(c["message"]["content"]), dict)
        else:  # an object may go on for ever; what there is must still be a valid prefix
            self.assertTrue(c["message"]["content"].startswith("{"))
        self.check_entries(c)
        self.check_choice_and_regex(range(4))

    def check_choice_and_regex(self, seeds):
        """guided_choice gives one of the choices, its tokens spelling it; guided_regex a full match."""
        for seed in seeds:
            status, body = self.gw.post("/v1/completions", {
                "model": "stories260K", "prompt": "Once upon a time", "max_tokens": 20, "seed": seed,
                "guided_choice": ["cat", "dog", "a big red fox"], "logprobs": 5, "logprobs_mode": "processed"})
            self.assertEqual(status, 200, body)
            c = body["choices"][0]
            self.assertIn(c["text"], ["cat", "dog", "a big red fox"])
            self.assertEqual(c["finish_reason"], "stop")
            self.assertEqual("".join(c["logprobs"]["tokens"]), c["text"])
            status, body = self.gw.post("/v1/completions", {
                "model": "stories260K", "prompt": "Once upon a time", "max_tokens": 30, "seed": seed,
                "guided_regex": "[0-9]{3}-(yes|no)"})
            self.assertEqual(status, 200, body)
            self.assertRegex(body["choices"][0]["text"], r"^[0-9]{3}-(yes|no)$")
            self.assertEqual(body["choices"][0]["finish_reason"], "stop")

    def test_streamed_structured_output(self):
        status, chunks, done = self.gw.stream("/v1/chat/completions", {
            "model": "stories260K", "messages": MESSAGES, "max_tokens": 400, "stream": True, "seed": 11,
            "logprobs": True, "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMAS[4]}}})
        self.assertEqual(status, 200, chunks)
        self.assertTrue(done)
        text, entries, finish = chat_choices(chunks)[0]  # checks each chunk's entries spell its delta
        self.assertEqual(finish, "stop")
        validate(json.loads(text), SCHEMAS[4], SCHEMAS[4])
        self.assertEqual(joined_bytes(entries), text.encode("utf-8"))

    def test_forced_tool_calls_validate(self):
        params = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                  "required": ["city", "days"], "additionalProperties": False}
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}},
                 {"type": "function", "function": {"name": "get_time", "parameters": {
                     "type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}}, "required": ["tz"],
                     "additionalProperties": False}}}]
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            for seed in range(3):
                status, body = self.chat(seed=seed, tools=tools, tool_choice=choice, parallel_tool_calls=False)
                self.assertEqual(status, 200, body)
                c = body["choices"][0]
                calls = c["message"].get("tool_calls")
                self.assertTrue(calls, body)
                self.assertEqual(len(calls), 1)
                fn = calls[0]["function"]
                if choice != "required":
                    self.assertEqual(fn["name"], "get_weather")
                schema = params if fn["name"] == "get_weather" else tools[1]["function"]["parameters"]
                validate(json.loads(fn["arguments"]), schema, schema)
                self.assertRegex(calls[0]["id"], r"^call_")

    def test_what_cannot_be_enforced_is_refused_by_name(self):
        bad = {"type": "object", "patternProperties": {"^a": {"type": "string"}}}
        status, body = self.chat(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": bad}})
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["param"], "response_format")
        self.assertIn("keyword 'patternProperties' is not supported", body["error"]["message"])
        status, body = self.gw.post("/v1/completions", {"model": "stories260K", "prompt": "Once",
                                                        "guided_regex": "(a)\\1"})
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["param"], "guided_regex")
        self.assertIn("backreference", body["error"]["message"])
        status, body = self.gw.post("/v1/completions", {"model": "stories260K", "prompt": "Once",
                                                        "guided_grammar": "root ::= \"a\""})
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["code"], "unsupported_constraint")


WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TZ = {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}}, "required": ["tz"],
      "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": TZ}}]


ARGS = r"(\{.*?\})"  # a call's arguments in a native-syntax pattern (lazy: `after` follows them)


def json_call(name_key="name", args_key="arguments", lead=""):
    """`call` for a call written as one JSON object, `{` `lead` then the name and arguments
    members; the family's `after` closes the object."""
    return r"\{" + lead + '"' + name_key + r'": "(\w+)", "' + args_key + '": ' + ARGS


class ForcedCallsBase(ModelCopyTestCase):
    """The CPU engine on a copy of stories260K with a family's `template` and no tokens added,
    so the family's markers are spelled by ordinary tokens and only the grammar makes the
    model write them. Forced calls (required and named, streamed and not) must come back as
    tool_calls whose arguments validate, and the text the model generated (its token ids,
    detokenized) must be the family's own syntax: `prefix`, calls (each matching `call`,
    groups name and arguments, then the literal `after`) joined by `separator`, `suffix`."""

    source_model = MODEL
    template = None
    prefix, suffix, separator, call, after = "", "", "", None, ""

    @classmethod
    def setUpClass(cls):
        if cls.template is None:
            raise unittest.SkipTest("the base class")
        # No SentencePiece space prefix, so that the generated ids detokenize byte for byte.
        # A longer context: Command R7B's and Mistral's templates render long system prompts.
        path, _ = cls.copy_model(set_kv={"tokenizer.ggml.add_space_prefix": (gguf_edit.BOOL, False),
                                         "llama.context_length": (gguf_edit.U32, 8192)})
        cls.gw = Gateway(path)
        cls.gw.wait_ready()

    def ask(self, **extra):
        body = {"model": self.model_id, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 300,
                "logprobs": True, "return_token_ids": True}
        body.update(extra)
        return self.completion(body)

    def check_calls(self, calls, names):
        self.assertEqual([c["function"]["name"] for c in calls][:len(names)], names)
        for c in calls:
            schema = WEATHER if c["function"]["name"] == "get_weather" else TZ
            validate(json.loads(c["function"]["arguments"]), schema, schema)
            self.assertRegex(c["id"], self.id_pattern)

    id_pattern = r"^call_[A-Za-z0-9]{24}$"

    def check_native(self, token_ids, calls, parallel=False):
        """The generated ids spell the calls in the family's syntax, exactly those parsed."""
        status, body = self.gw.post("/detokenize", {"model": self.model_id, "tokens": token_ids})
        self.assertEqual(status, 200, body)
        raw = body["prompt"]
        one = self.call + re.escape(self.after)
        whole = re.escape(self.prefix) + one + "(?:" + re.escape(self.separator) + one + ")*" + re.escape(self.suffix)
        # With one call (parallel_tool_calls false), the gateway ends the output once the
        # parser has read the call, so the model may not have written all of the closing
        # literal: then the raw text plus the rest of it must be the syntax.
        closing = self.after + self.suffix
        if not parallel:
            # A cut may fall inside a character the model spells byte by byte (DeepSeek's
            # ｜ and ▁): its first bytes detokenize as U+FFFD.
            raw = raw.rstrip("\ufffd")
        cuts = [k for k in range(len(closing) + 1) if raw.endswith(closing[:k])]
        self.assertTrue(any(re.fullmatch(whole, raw + closing[k:], re.S) for k in cuts), raw)
        if len(calls) > 1 or parallel:
            self.assertIsNotNone(re.fullmatch(whole, raw, re.S), raw)
        found = [(m.group(1), m.group(2)) for m in re.finditer(self.call, raw[len(self.prefix):], re.S)]
        self.assertEqual(found, [(c["function"]["name"], c["function"]["arguments"]) for c in calls], raw)

    def check_logprobs(self, c):
        """The logprob lists of each call spell its name and arguments: the model's own tokens."""
        lists = c["logprobs"]["tool_calls"]
        self.assertEqual(len(lists), len(c["message"]["tool_calls"]))
        for call, lp in zip(c["message"]["tool_calls"], lists):
            self.assertEqual(joined_bytes(lp["arguments"]), call["function"]["arguments"].encode())
            self.assertEqual(joined_bytes(lp["name"]), call["function"]["name"].encode())

    def test_required_and_named_calls_in_the_familys_syntax(self):
        for seed in range(3):
            c = self.ask(seed=seed, tool_choice="required", parallel_tool_calls=False)
            self.assertEqual(c["finish_reason"], "tool_calls", c)
            self.assertIsNone(c["message"]["content"])
            self.assertEqual(len(c["message"]["tool_calls"]), 1)
            self.check_calls(c["message"]["tool_calls"], [])
            self.check_native(c["token_ids"], c["message"]["tool_calls"])
            self.check_logprobs(c)
            c = self.ask(seed=seed, tool_choice={"type": "function", "function": {"name": "get_time"}})
            self.assertEqual(c["finish_reason"], "tool_calls", c)
            self.assertEqual(len(c["message"]["tool_calls"]), 1)
            self.check_calls(c["message"]["tool_calls"], ["get_time"])
            self.check_native(c["token_ids"], c["message"]["tool_calls"])
            self.check_logprobs(c)
            # Parallel calls: one or more; the model may go on calling until max_tokens, and
            # then every call but the cut last one is complete and valid.
            c = self.ask(seed=seed, tool_choice="required", max_tokens=200)
            calls = c["message"]["tool_calls"]
            self.assertGreaterEqual(len(calls), 1)
            self.check_calls(calls if c["finish_reason"] == "tool_calls" else calls[:-1], [])
            if c["finish_reason"] == "tool_calls":
                self.check_native(c["token_ids"], calls, parallel=True)

    def test_streamed_forced_calls(self):
        for choice, names in (({"type": "function", "function": {"name": "get_weather"}}, ["get_weather"]),
                              ("required", [])):
            chunks = self.ask(seed=5, stream=True, tool_choice=choice, parallel_tool_calls=False)
            calls, ids = {}, []
            finish = None
            for ch in chunks:
                for c in ch.get("choices", []):
                    finish = c["finish_reason"] or finish
                    ids += c.get("token_ids") or []
                    for d in c["delta"].get("tool_calls") or []:
                        cur = calls.setdefault(d["index"], {"id": d.get("id"),
                                                            "function": {"name": "", "arguments": ""}})
                        cur["function"]["name"] += d.get("function", {}).get("name") or ""
                        cur["function"]["arguments"] += d.get("function", {}).get("arguments") or ""
            self.assertEqual(finish, "tool_calls")
            self.assertEqual(len(calls), 1)
            self.check_calls([calls[0]], names)
            self.check_native(ids, [calls[0]])


class HermesForcedCalls(ForcedCallsBase):
    template = "Qwen-Qwen2.5-7B-Instruct.jinja"
    separator = "\n"
    call, after = r"<tool_call>\n" + json_call(), "}\n</tool_call>"


class Llama3ForcedCalls(ForcedCallsBase):
    template = "meta-llama-Llama-3.1-8B-Instruct.jinja"
    separator = "; "
    call, after = json_call(args_key="parameters"), "}"


class MistralForcedCalls(ForcedCallsBase):
    template = "Mistral-Small-3.2-24B-Instruct-2506.jinja"
    call = r"\[TOOL_CALLS\](\w+)\[ARGS\]" + ARGS
    id_pattern = r"^[A-Za-z0-9]{9}$"


class MistralNemoForcedCalls(ForcedCallsBase):
    template = "mistralai-Mistral-Nemo-Instruct-2407.jinja"
    prefix, suffix, separator = "[TOOL_CALLS][", "]", ", "
    call, after = json_call() + r', "id": "[A-Za-z0-9]{9}"', "}"
    id_pattern = r"^[A-Za-z0-9]{9}$"


class DeepSeekV31ForcedCalls(ForcedCallsBase):
    template = "deepseek-ai-DeepSeek-V3.1.jinja"
    prefix, suffix = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    call, after = r"<｜tool▁call▁begin｜>(\w+)<｜tool▁sep｜>" + ARGS, "<｜tool▁call▁end｜>"


class DeepSeekR1ForcedCalls(ForcedCallsBase):
    template = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    prefix, suffix, separator = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "\n"
    call, after = r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>(\w+)\n```json\n" + ARGS, "\n```<｜tool▁call▁end｜>"


class GraniteForcedCalls(ForcedCallsBase):
    template = "ibm-granite-granite-3.3-2B-Instruct.jinja"
    prefix, suffix, separator = "<|tool_call|>[", "]", ", "
    call, after = json_call(), "}"


class CommandRForcedCalls(ForcedCallsBase):
    template = "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"
    prefix, suffix, separator = "<|START_ACTION|>[\n    ", "\n]<|END_ACTION|>", ",\n    "
    call, after = json_call("tool_name", "parameters", lead=r'"tool_call_id": "[0-9]{1,3}", '), "}"


class GptOssForcedCalls(ForcedCallsBase):
    template = "openai-gpt-oss-120b.jinja"
    separator = "<|start|>assistant"
    call, after = r" to=functions\.(\w+)<\|channel\|>commentary json<\|message\|>" + ARGS, "<|call|>"


if __name__ == "__main__":
    main()
