#!/usr/bin/env python3
"""A small HTTPS webhook server for the API emulator's tests (standard library only).

Usage: webhook_server.py CERT_PEM KEY_PEM

Binds 127.0.0.1 on a free port, prints the port on stdout, and answers:
  POST /validate  AdmissionReview v1: denies objects labelled deny=true (code 403, a message
                  naming the object), warns about objects labelled warn=true, allows the rest;
                  every review is appended to the log (see /reviews).
  POST /mutate    AdmissionReview v1: adds the label mutated=true with a JSONPatch.
  POST /slow      sleeps 5 seconds, then allows (for timeoutSeconds tests).
  POST /convert   ConversionReview v1 between example.io/v1 (spec.colour) and example.io/v2
                  (spec.color); refuses to convert a colour named "invalid".
  GET  /reviews   the AdmissionReview requests received so far, as a JSON list.
"""

import base64
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REVIEWS = []
LOCK = threading.Lock()


def admission_answer(review, path):
    request = review["request"]
    with LOCK:
        REVIEWS.append(request)
    obj = request.get("object") or request.get("oldObject") or {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    response = {"uid": request["uid"], "allowed": True}
    if path == "/validate":
        if labels.get("deny") == "true":
            response = {
                "uid": request["uid"],
                "allowed": False,
                "status": {
                    "code": 403,
                    "message": "%s %s is labelled deny=true" % (request["kind"]["kind"], request["name"]),
                },
            }
        elif labels.get("warn") == "true":
            response["warnings"] = ["%s is labelled warn=true" % request["name"]]
    elif path == "/mutate":
        ops = []
        if not labels:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
        ops.append({"op": "add", "path": "/metadata/labels/mutated", "value": "true"})
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def convert_one(obj, desired):
    out = json.loads(json.dumps(obj))
    spec = out.setdefault("spec", {})
    if desired == "example.io/v2" and "colour" in spec:
        spec["color"] = spec.pop("colour")
    elif desired == "example.io/v1" and "color" in spec:
        spec["colour"] = spec.pop("color")
    if spec.get("colour") == "invalid" or spec.get("color") == "invalid":
        raise ValueError("cannot convert the colour 'invalid'")
    out["apiVersion"] = desired
    return out


def conversion_answer(review):
    request = review["request"]
    desired = request["desiredAPIVersion"]
    try:
        converted = [convert_one(o, desired) for o in request["objects"]]
        result = {"status": "Success"}
    except ValueError as error:
        converted = []
        result = {"status": "Failure", "message": str(error)}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": request["uid"], "convertedObjects": converted, "result": result},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with LOCK:
            self.reply(list(REVIEWS))

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        review = json.loads(self.rfile.read(length))
        path = self.path.split("?")[0]
        if path == "/slow":
            time.sleep(5)
            path = "/validate"
        if path == "/convert":
            self.reply(conversion_answer(review))
        else:
            self.reply(admission_answer(review, path))


def main():
    cert, key = sys.argv[1], sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
