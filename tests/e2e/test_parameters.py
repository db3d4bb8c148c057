"""End to end: every OpenAI request parameter loom serves, checked for its effect on
real output (loom-gateway + loom-engine-cpu on stories260K): max_tokens and
max_completion_tokens, temperature, top_p, top_k, min_p, seed, stop, n, the penalties,
logit_bias, stream_options.include_usage, echo, logprobs_mode, allowed_token_ids, and
the four forms of `prompt`.

Reference values are shared/reference/stories260K.json (the greedy continuation and its
log-probabilities from an independent implementation).
"""
import json
import math

import loomtest
from loomtest import completion_choices, joined_bytes, shared, token_bytes

MODEL = shared("models/stories260K.gguf")
REF = json.load(open(shared("reference/stories260K.json")))
CASE = REF["cases"][0]  # "Once upon a time" -> ", there was a little girl named Lily. ..."
REF_TOL = 2e-2          # as in test_walking_skeleton.py
NAME = "stories260K"


def ids(tokens):
    return [int(t.split(":", 1)[1]) for t in tokens]


class Parameters(loomtest.GatewayTestCase):
    gateway_model = MODEL

    def complete(self, **kw):
        body = {"model": NAME, "prompt": CASE["prompt"], "temperature": 0}
        body.update(kw)
        status, out = self.gw.post("/v1/completions", body)
        self.assertEqual(status, 200, out)
        return out

    def chat(self, content=CASE["prompt"], **kw):
        body = {"model": NAME, "messages": [{"role": "user", "content": content}], "temperature": 0}
        body.update(kw)
        status, out = self.gw.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, out)
        return out

    def text(self, **kw):
        return self.complete(**kw)["choices"][0]["text"]

    def token_ids(self, **kw):
        out = self.complete(logprobs=0, return_tokens_as_token_ids=True, **kw)
        return ids(out["choices"][0]["logprobs"]["tokens"])

    # -- length -----------------------------------------------------------------------

    def test_max_tokens_and_max_completion_tokens(self):
        out = self.complete(max_tokens=3, logprobs=0)
        ch = out["choices"][0]
        self.assertEqual(ch["finish_reason"], "length")
        self.assertEqual(len(ch["logprobs"]["tokens"]), 3)
        self.assertEqual(ch["text"], ", there was")
        self.assertEqual(out["usage"]["completion_tokens"], 3)
        self.assertIsNone(self.complete()["choices"][0]["logprobs"])
        self.assertEqual(self.complete()["usage"]["completion_tokens"], 16)  # the completions default
        out = self.chat(max_completion_tokens=4, max_tokens=9, logprobs=True)
        self.assertEqual(len(out["choices"][0]["logprobs"]["content"]), 4)
        self.assertEqual(out["usage"]["completion_tokens"], 4)
        out = self.chat(max_tokens=6)
        self.assertEqual(out["usage"]["completion_tokens"], 6)
        self.assertEqual(out["choices"][0]["message"]["content"], ", there was a little g")

    # -- sampling ---------------------------------------------------------------------

    def test_greedy_matches_the_reference(self):
        self.assertEqual(self.text(max_tokens=24), CASE["text"])
        self.assertEqual(self.token_ids(max_tokens=24), [s["id"] for s in CASE["steps"]])

    def test_filters_that_keep_one_token_are_greedy(self):
        greedy = self.text(max_tokens=24)
        sampled = {self.text(max_tokens=24, temperature=1.5, seed=s) for s in (1, 2, 3)}
        self.assertNotIn(greedy, sampled)  # hot sampling leaves the greedy path
        for kw in ({"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}):
            with self.subTest(**kw):
                self.assertEqual(self.text(max_tokens=24, temperature=1.5, seed=5, **kw), greedy)

    def test_processed_logprobs_show_the_filters(self):
        out = self.complete(max_tokens=4, temperature=0.7, seed=1, top_k=2, logprobs=3,
                            logprobs_mode="processed")
        lp = out["choices"][0]["logprobs"]
        raw = self.complete(max_tokens=4, temperature=0.7, seed=1, top_k=2, logprobs=3)["choices"][0]["logprobs"]
        self.assertEqual(lp["tokens"], raw["tokens"])  # the same draws
        for top, raw_top in zip(lp["top_logprobs"], raw["top_logprobs"]):
            values = sorted(top.values(), reverse=True)
            self.assertEqual(len(values), 3)
            self.assertEqual(values[2], -9999.0)  # top_k=2 removed the third: -inf
            self.assertAlmostEqual(math.exp(values[0]) + math.exp(values[1]), 1.0, delta=1e-4)
            # Processed values are sharper than raw ones (temperature 0.7 < 1).
            self.assertGreater(values[0], max(raw_top.values()))
        # Greedy with processed logprobs: temperature is taken as 1, no filter: raw values.
        p = self.complete(max_tokens=3, logprobs=1, logprobs_mode="processed")["choices"][0]["logprobs"]
        r = self.complete(max_tokens=3, logprobs=1)["choices"][0]["logprobs"]
        for a, b in zip(p["token_logprobs"], r["token_logprobs"]):
            self.assertAlmostEqual(a, b, delta=1e-5)

    def test_seed_reproduces_and_varies(self):
        a = self.text(max_tokens=40, temperature=1.0, seed=1234)
        self.assertEqual(a, self.text(max_tokens=40, temperature=1.0, seed=1234))
        others = {self.text(max_tokens=40, temperature=1.0, seed=s) for s in (1, 2, 3)}
        self.assertGreater(len(others | {a}), 1)
        chat_a = self.chat(max_tokens=30, temperature=1.0, seed=99)["choices"][0]["message"]["content"]
        chat_b = self.chat(max_tokens=30, temperature=1.0, seed=99)["choices"][0]["message"]["content"]
        self.assertEqual(chat_a, chat_b)

    # -- stop ---------------------------------------------------------------------------

    def check_stop(self, stop, text, tokens):
        """Non-streamed and streamed, completions and chat: text, finish_reason, and
        logprob entries trimmed with the text."""
        out = self.complete(max_tokens=24, stop=stop, logprobs=1)
        ch = out["choices"][0]
        self.assertEqual(ch["text"], text)
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertEqual(ch["logprobs"]["tokens"], tokens)
        self.assertEqual(b"".join(token_bytes(t) for t in tokens), text.encode())
        self.assertEqual(len(ch["logprobs"]["token_logprobs"]), len(tokens))
        status, chunks, done = self.gw.stream("/v1/completions", {
            "model": NAME, "prompt": CASE["prompt"], "temperature": 0, "max_tokens": 24, "stop": stop,
            "logprobs": 1, "stream": True})
        self.assertTrue(done)
        s_text, s_tokens, _, finish = completion_choices(chunks)[0]
        self.assertEqual((s_text, s_tokens, finish), (text, tokens, "stop"))
        msg = self.chat(max_tokens=24, stop=stop, logprobs=True)["choices"][0]
        self.assertEqual(msg["message"]["content"], text)
        self.assertEqual(msg["finish_reason"], "stop")
        self.assertEqual(joined_bytes(msg["logprobs"]["content"]), text.encode())
        self.assertEqual([e["token"] for e in msg["logprobs"]["content"]], tokens)

    def test_stop_at_a_token_boundary(self):
        self.check_stop(" little", ", there was a", [",", " there", " was", " a"])

    def test_stop_split_across_tokens(self):
        # Greedy tokens: "," " there" " was" " a" " little" " g" "ir" "l" " named" ...
        self.check_stop("irl na", ", there was a little g", [",", " there", " was", " a", " little", " g"])

    def test_stop_inside_a_token_trims_it(self):
        self.check_stop("rl na", ", there was a little gi", [",", " there", " was", " a", " little", " g", "i"])

    def test_stop_at_the_very_start(self):
        self.check_stop([",", "zzz"], "", [])

    def test_up_to_four_stop_strings_the_earliest_wins(self):
        self.check_stop(["Lily", "qqq", " was", "zz"], ", there", [",", " there"])
        status, body = self.gw.post("/v1/completions", {"model": NAME, "prompt": "x", "stop": list("abcde")})
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "stop")

    def test_stop_usage_counts_tokens_up_to_the_stop(self):
        out = self.complete(max_tokens=24, stop=" little")
        self.assertEqual(out["usage"]["completion_tokens"], 5)  # ", there was a little"

    # -- n and prompts ----------------------------------------------------------------

    def test_n_choices_each_with_their_own_logprobs(self):
        out = self.complete(max_tokens=12, temperature=1.0, seed=11, n=3, logprobs=2, ignore_eos=True)
        chs = out["choices"]
        self.assertEqual([c["index"] for c in chs], [0, 1, 2])
        for c in chs:
            self.assertEqual(len(c["logprobs"]["tokens"]), 12)
            self.assertEqual(b"".join(token_bytes(t) for t in c["logprobs"]["tokens"]), c["text"].encode())
        self.assertGreater(len({c["text"] for c in chs}), 1)
        self.assertEqual(out["usage"]["completion_tokens"], 36)
        # Choice i uses seed + i: choice 1 of seed 11 is choice 0 of seed 12.
        self.assertEqual(chs[1]["text"], self.text(max_tokens=12, temperature=1.0, seed=12, ignore_eos=True))
        out = self.chat(max_tokens=8, temperature=1.0, seed=11, n=2, logprobs=True, top_logprobs=1)
        for c in out["choices"]:
            self.assertEqual(joined_bytes(c["logprobs"]["content"]), c["message"]["content"].encode())

    def test_choices_are_indexed_prompt_index_times_n_plus_i(self):
        prompts = ["The little dog", "Lily and Tom went to the park. They"]
        out = self.complete(prompt=prompts, n=2, max_tokens=8)
        self.assertEqual([c["index"] for c in out["choices"]], [0, 1, 2, 3])
        for p, prompt in enumerate(prompts):
            alone = self.text(prompt=prompt, max_tokens=8)
            self.assertEqual(out["choices"][2 * p]["text"], alone)
            self.assertEqual(out["choices"][2 * p + 1]["text"], alone)
        self.assertNotEqual(out["choices"][0]["text"], out["choices"][2]["text"])

    def test_prompt_forms(self):
        ids_ = CASE["prompt_ids"]
        want = self.text(max_tokens=8)
        self.assertEqual(self.text(prompt=ids_, max_tokens=8), want)
        out = self.complete(prompt=[CASE["prompt"], REF["cases"][1]["prompt"]], max_tokens=8)
        self.assertEqual(out["choices"][0]["text"], want)
        self.assertEqual(out["choices"][1]["text"], REF["cases"][1]["text"][:len(out["choices"][1]["text"])])
        out = self.complete(prompt=[ids_, REF["cases"][1]["prompt_ids"]], max_tokens=8)
        self.assertEqual(out["choices"][0]["text"], want)
        self.assertEqual(out["usage"]["prompt_tokens"], len(ids_) + len(REF["cases"][1]["prompt_ids"]))

    # -- penalties and biases -----------------------------------------------------------

    def test_penalties_change_greedy_output(self):
        base = self.token_ids(max_tokens=48)
        repeats = len(base) - len(set(base))
        self.assertGreaterEqual(repeats, 8)  # stories260K repeats itself
        for kw in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"repetition_penalty": 1.8}):
            with self.subTest(**kw):
                got = self.token_ids(max_tokens=48, **kw)
                self.assertNotEqual(got, base)
                self.assertLess(len(got) - len(set(got)), repeats)
        # A negative presence penalty encourages repeats.
        got = self.token_ids(max_tokens=48, presence_penalty=-2.0)
        self.assertGreaterEqual(len(got) - len(set(got)), repeats)

    def test_logit_bias(self):
        base = self.token_ids(max_tokens=6)
        first = base[0]
        got = self.token_ids(max_tokens=6, logit_bias={str(first): -100})
        self.assertNotEqual(got[0], first)
        self.assertNotIn(first, got)
        forced = self.token_ids(max_tokens=6, logit_bias={"300": 100})
        self.assertEqual(forced, [300] * 6)
        # Raw logprobs are taken before the bias: the forced token's own value is unbiased.
        out = self.complete(max_tokens=1, logprobs=0, logit_bias={"300": 100})
        self.assertLess(out["choices"][0]["logprobs"]["token_logprobs"][0], -1.0)

    def test_allowed_token_ids(self):
        allowed = [261, 286, 383, 403, 432]
        got = self.token_ids(max_tokens=12, temperature=1.0, seed=4, allowed_token_ids=allowed)
        self.assertEqual(len(got), 12)
        self.assertTrue(set(got) <= set(allowed), got)

    # -- streaming usage ----------------------------------------------------------------

    def test_stream_options_include_usage(self):
        for path, body in (("/v1/completions", {"prompt": CASE["prompt"]}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})):
            with self.subTest(path=path):
                req = dict(body, model=NAME, temperature=0, max_tokens=5, n=2, stream=True)
                _, chunks, done = self.gw.stream(path, dict(req, stream_options={"include_usage": True}))
                self.assertTrue(done)
                last = chunks[-1]
                self.assertEqual(last["choices"], [])
                self.assertEqual(last["usage"]["completion_tokens"], 10)
                self.assertEqual(last["usage"]["total_tokens"],
                                 last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"])
                for c in chunks[:-1]:
                    self.assertIsNone(c["usage"])
                _, chunks, done = self.gw.stream(path, req)
                self.assertTrue(done)
                self.assertTrue(all("usage" not in c for c in chunks))
                self.assertTrue(all(c["choices"] for c in chunks))

    def test_stream_options_continuous_usage_stats(self):
        # vLLM's continuous_usage_stats: every chunk carries its choice's usage so far (the
        # role chunk 0 tokens); the final usage chunk is the request's, as with include_usage.
        for path, body in (("/v1/completions", {"prompt": CASE["prompt"]}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})):
            with self.subTest(path=path):
                req = dict(body, model=NAME, temperature=0, max_tokens=5, stream=True,
                           stream_options={"include_usage": True, "continuous_usage_stats": True})
                _, chunks, done = self.gw.stream(path, req)
                self.assertTrue(done)
                final = chunks[-1]
                self.assertEqual(final["choices"], [])
                self.assertEqual(final["usage"]["completion_tokens"], 5)
                counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
                if path == "/v1/chat/completions":
                    self.assertEqual(counts[0], 0)  # the role chunk
                    counts = counts[1:]
                # One token per chunk here, then the finish chunk (no text) with the same count.
                self.assertEqual(counts, [1, 2, 3, 4, 5] + [5] * (len(counts) - 5))
                self.assertIsNotNone(chunks[-2]["choices"][0]["finish_reason"])
                for c in chunks[:-1]:
                    self.assertEqual(c["usage"]["prompt_tokens"], final["usage"]["prompt_tokens"])
                    self.assertEqual(c["usage"]["total_tokens"],
                                     c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"])
                # Without include_usage it changes nothing (as in vLLM).
                req["stream_options"] = {"continuous_usage_stats": True}
                _, chunks, done = self.gw.stream(path, req)
                self.assertTrue(all("usage" not in c for c in chunks))

    def test_nested_unknown_keys_are_named(self):
        chat = {"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        for body, name in ((dict(chat, stream=True, stream_options={"include_usage": True, "include_usge": 1}),
                            "stream_options.include_usge"),
                           (dict(chat, response_format={"type": "json_object", "strict": True}),
                            "response_format.strict")):
            with self.subTest(name=name):
                st, err = self.gw.post("/v1/chat/completions", body)
                self.assertEqual(st, 400, err)
                self.assertEqual(err["error"]["message"], "Unrecognized request argument supplied: " + name)
                self.assertEqual(err["error"]["param"], name)

    # -- echo ---------------------------------------------------------------------------

    def test_echo_scores_a_continuation_like_lm_eval(self):
        # The prompt ids plus the reference's greedy continuation, scored without
        # generating: each continuation token's logprob is the reference's.
        cont = [s["id"] for s in CASE["steps"][:10]]
        prompt = CASE["prompt_ids"] + cont
        out = self.complete(prompt=prompt, echo=True, logprobs=1, max_tokens=0)
        ch = out["choices"][0]
        lp = ch["logprobs"]
        self.assertEqual(len(lp["tokens"]), len(prompt))
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        self.assertEqual(lp["tokens"][0], "<s>")
        self.assertEqual(b"".join(token_bytes(t) for t in lp["tokens"]), ch["text"].encode())
        self.assertEqual(ch["text"], "<s> Once upon a time" + CASE["text"][:len(ch["text"]) - 20])
        n = len(CASE["prompt_ids"])
        for k, step in enumerate(CASE["steps"][:10]):
            self.assertAlmostEqual(lp["token_logprobs"][n + k], step["logprob"], delta=REF_TOL)
            # Greedy continuation: each token is its position's top alternative.
            top = lp["top_logprobs"][n + k]
            self.assertEqual(max(top, key=top.get), lp["tokens"][n + k])
        self.assertEqual(lp["text_offset"][:3], [0, 3, 8])
        self.assertEqual(out["usage"], {"prompt_tokens": len(prompt), "completion_tokens": 0,
                                        "total_tokens": len(prompt)})

    def test_echo_then_completion_streamed_and_not(self):
        out = self.complete(echo=True, max_tokens=6, logprobs=2)
        ch = out["choices"][0]
        self.assertEqual(ch["text"], "Once upon a time, there was a little g")  # the prompt as sent
        self.assertEqual(len(ch["logprobs"]["tokens"]), 5 + 6)
        self.assertIsNone(ch["logprobs"]["token_logprobs"][0])
        self.assertTrue(all(v is not None for v in ch["logprobs"]["token_logprobs"][1:]))
        _, chunks, done = self.gw.stream("/v1/completions", {
            "model": NAME, "prompt": CASE["prompt"], "temperature": 0, "echo": True, "max_tokens": 6,
            "logprobs": 2, "stream": True})
        self.assertTrue(done)
        text, tokens, lps, finish = completion_choices(chunks)[0]
        self.assertEqual(text, ch["text"])
        self.assertEqual(tokens, ch["logprobs"]["tokens"])
        self.assertEqual(lps, ch["logprobs"]["token_logprobs"])
        self.assertEqual(finish, "length")
        # Without logprobs the text is echoed all the same; echo with n=2 and two prompts.
        out = self.complete(prompt=["Once upon a time", "The little dog"], n=2, echo=True, max_tokens=2)
        self.assertEqual([c["text"][:7] for c in out["choices"]], ["Once up"] * 2 + ["The lit"] * 2)
        # Stop strings are not matched in the echoed prompt.
        out = self.complete(echo=True, max_tokens=24, stop=["upon", " little"])
        self.assertEqual(out["choices"][0]["text"], "Once upon a time, there was a")
        self.assertEqual(out["choices"][0]["finish_reason"], "stop")


if __name__ == "__main__":
    loomtest.main()
