"""Reference data for the rapidocr models (scripts/onnx-rapidocr.sh).

Renders a line of text with Pillow (DejaVuSans), makes the recognizer's and
the classifier's inputs the way rapidocr preprocesses them, runs onnxruntime
(the reference, never needed by the C core) and writes, into OUT:
  rec_x.npy, rec_y.npy   recognizer input [1,3,48,W] and output [1,T,C]
  cls_x.npy, cls_y.npy   classifier input [1,3,48,192] and output [1,2]
  rec_text.txt           the text onnxruntime reads back (greedy CTC)
With --decode Y.npy it prints the greedy CTC decoding of Y instead.
"""
import os
import sys

import numpy as np


def models_dir():
    import rapidocr_onnxruntime
    return os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models")


def charset(rec_path):
    import onnxruntime as ort
    sess = ort.InferenceSession(rec_path, providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta().custom_metadata_map
    chars = meta["character"].splitlines()
    return ["blank"] + chars + [" "]


def ctc_decode(y, chars):
    idx = y[0].argmax(axis=1)
    out, prev = [], -1
    for i in idx:
        if i != prev and i != 0:
            out.append(chars[i])
        prev = i
    return "".join(out)


def render(text, w, h):
    from PIL import Image, ImageDraw, ImageFont
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 32)
    img = Image.new("RGB", (w, h), "white")
    ImageDraw.Draw(img).text((6, 6), text, fill="black", font=font)
    return img


def norm(img):
    a = np.asarray(img, dtype=np.float32) / 255.0
    a = (a - 0.5) / 0.5
    return a.transpose(2, 0, 1)[None].astype(np.float32)


def main():
    import onnxruntime as ort
    md = models_dir()
    rec = os.path.join(md, "ch_PP-OCRv4_rec_infer.onnx")
    cls = os.path.join(md, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    if sys.argv[1] == "--models":
        print(md)
        return
    if sys.argv[1] == "--decode":
        print(ctc_decode(np.load(sys.argv[2]), charset(rec)))
        return
    out = sys.argv[1]
    text = "Hello vmrpc 2026"
    img = render(text, 320, 48)
    rec_x = norm(img)
    cls_x = norm(img.resize((192, 48)))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    r = ort.InferenceSession(rec, so, providers=["CPUExecutionProvider"])
    c = ort.InferenceSession(cls, so, providers=["CPUExecutionProvider"])
    rec_y = r.run(None, {r.get_inputs()[0].name: rec_x})[0]
    cls_y = c.run(None, {c.get_inputs()[0].name: cls_x})[0]
    np.save(os.path.join(out, "rec_x.npy"), rec_x)
    np.save(os.path.join(out, "rec_y.npy"), rec_y)
    np.save(os.path.join(out, "cls_x.npy"), cls_x)
    np.save(os.path.join(out, "cls_y.npy"), cls_y)
    got = ctc_decode(rec_y, charset(rec))
    with open(os.path.join(out, "rec_text.txt"), "w") as f:
        f.write(got + "\n")
    print("onnxruntime reads: %r (rendered %r)" % (got, text))


if __name__ == "__main__":
    main()
