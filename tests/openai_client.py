"""The official `openai` Python client against the server (`examples/serve.rs`).

Run by `scripts/openai_client_test.sh`, which starts the server on `llama31_tiny` with the
`llama3_style` tokenizer on Flex:

    python tests/openai_client.py BASE_URL API_KEY MODEL_NAME tests/text/chat_generate.json

Checks chat and completions, whole and streamed, greedy text equal to transformers' (the
reference file), `n` with a seed, bad requests raising the client's errors with the server's
message, and `client.models.list()`. Prints one line per check and `N passed, N failed`.
"""

import json
import sys
import traceback

import openai

BASE_URL, API_KEY, MODEL, REFERENCE = sys.argv[1:5]
client = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key=API_KEY, max_retries=0, timeout=300)
reference = json.load(open(REFERENCE))
generations = reference["generations"]
MAX_TOKENS = reference["max_new_tokens"]

checks = []


def check(fn):
    checks.append(fn)
    return fn


@check
def models_list():
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL], ids
    assert client.models.retrieve(MODEL).id == MODEL


@check
def chat_greedy_equals_reference():
    for g in generations:
        r = client.chat.completions.create(
            model=MODEL, messages=g["messages"], max_tokens=MAX_TOKENS, temperature=0
        )
        choice = r.choices[0]
        assert choice.message.role == "assistant"
        assert choice.message.content == g["text"], (choice.message.content, g["text"])
        assert choice.finish_reason == "length", choice.finish_reason
        prompt_tokens = sum(1 for t in g["prompt_ids"] if t != 0)  # less the padding id
        assert r.usage.prompt_tokens == prompt_tokens, r.usage
        assert r.usage.completion_tokens == MAX_TOKENS, r.usage
        assert r.usage.total_tokens == prompt_tokens + MAX_TOKENS, r.usage


@check
def chat_stream_equals_reference():
    for g in generations:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=g["messages"],
            max_completion_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == g["text"], (text, g["text"])
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert reasons[-1] == "length" and all(r is None for r in reasons[:-1]), reasons
        assert chunks[-1].usage.completion_tokens == MAX_TOKENS, chunks[-1]


@check
def completions_from_ids_equal_reference():
    for g in generations:
        r = client.completions.create(
            model=MODEL, prompt=g["prompt_ids"], max_tokens=MAX_TOKENS, temperature=0
        )
        assert r.choices[0].text == g["text"], (r.choices[0].text, g["text"])
        assert r.choices[0].finish_reason == "length"
        stream = client.completions.create(
            model=MODEL, prompt=g["prompt_ids"], max_tokens=MAX_TOKENS, temperature=0, stream=True
        )
        chunks = list(stream)
        assert "".join(c.choices[0].text for c in chunks) == g["text"]
        assert chunks[-1].choices[0].finish_reason == "length"


@check
def completions_from_text():
    r = client.completions.create(model=MODEL, prompt="Hello world", max_tokens=5, temperature=0)
    assert r.object == "text_completion"
    assert r.usage.completion_tokens == 5
    assert isinstance(r.choices[0].text, str)


@check
def n_with_a_seed():
    def ask(n, seed):
        r = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=8,
            temperature=1.0,
            seed=seed,
            n=n,
            extra_body={"top_k": 40},
        )
        assert [c.index for c in r.choices] == list(range(n))
        assert r.usage.completion_tokens == 8 * n
        return [c.message.content for c in r.choices]

    two = ask(2, 11)
    assert ask(2, 11) == two, "the same seed draws the same tokens"
    assert ask(1, 12) == two[1:], "choice 1 of seed 11 is seed 12"
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=8,
        temperature=1.0,
        seed=11,
        n=2,
        stream=True,
        extra_body={"top_k": 40},
    )
    texts = ["", ""]
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == two, (texts, two)


@check
def bad_requests_raise():
    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], temperature=-1
        )
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert "temperature" in e.message, e.message
        assert e.body["param"] == "temperature", e.body
        assert e.body["type"] == "invalid_request_error", e.body
    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "Hi"}])
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.code == "model_not_found", e.body
    try:
        client.completions.create(model=MODEL, prompt="Hi", logprobs=2)
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.code == "unsupported_parameter", e.body
    try:
        client.completions.create(model=MODEL, prompt=[5] * 5000, max_tokens=1)
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.code == "context_length_exceeded", e.body
    wrong = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key="sk-wrong", max_retries=0)
    try:
        wrong.models.list()
        raise AssertionError("no error")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.code == "invalid_api_key", e.body


passed = failed = 0
for fn in checks:
    try:
        fn()
        passed += 1
        print(f"ok   {fn.__name__}")
    except Exception:
        failed += 1
        print(f"FAIL {fn.__name__}")
        traceback.print_exc()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
