"""tb_events.py - TensorBoard event files for the tests, apart from libdp:
TFRecord frames (tfr_frame.py) around Event messages decoded and built by
python3-protobuf from tests/data/tensorboard/events.proto, compiled by the
test with protoc into a directory on PYTHONPATH (events_pb2).

    python3 tb_events.py dump FILE    one JSON line per event
    python3 tb_events.py torch FILE   write an event file in the forms PyTorch's
                                      SummaryWriter and TensorFlow 2 write"""
import json
import struct
import sys

import events_pb2 as pb
import hparams_pb2 as hp
from tfr_frame import crc32c, frame, mask


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        n, c = struct.unpack_from("<QI", data, i)
        assert mask(crc32c(data[i:i + 8])) == c, "length CRC at byte %d" % i
        body = data[i + 12:i + 12 + n]
        (d,) = struct.unpack_from("<I", data, i + 12 + n)
        assert mask(crc32c(body)) == d, "data CRC at byte %d" % i
        yield body
        i += 16 + n


def plugin_values(summary):
    """The text and hparams plugins' values: {tag: {"text": ...}} or
    {tag: {"hparams": {...}, "start": t}} or {tag: {"status": NAME, "end": t}}."""
    out = {}
    for v in summary.value:
        name = v.metadata.plugin_data.plugin_name
        if name == "text":
            assert v.tensor.dtype == pb.DT_STRING, v
            out[v.tag] = {"text": v.tensor.string_val[0].decode()}
        elif name == "hparams":
            d = hp.HParamsPluginData()
            d.ParseFromString(v.metadata.plugin_data.content)
            kind = d.WhichOneof("data")
            if kind == "session_start_info":
                s = d.session_start_info
                out[v.tag] = {"hparams": {k: getattr(x, x.WhichOneof("kind")) for k, x in s.hparams.items()},
                              "start": s.start_time_secs, "version": d.version}
            elif kind == "session_end_info":
                out[v.tag] = {"status": hp.Status.Name(d.session_end_info.status),
                              "end": d.session_end_info.end_time_secs}
    return out


def dump(path):
    for body in records(path):
        ev = pb.Event()
        ev.ParseFromString(body)
        out = {"wall_time": ev.wall_time, "step": ev.step}
        if ev.HasField("file_version"):
            out["file_version"] = ev.file_version
        if ev.HasField("summary"):
            vals = {}
            for v in ev.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    vals[v.tag] = v.simple_value
                elif kind == "histo":
                    h = v.histo
                    vals[v.tag] = {"min": h.min, "max": h.max, "num": h.num, "sum": h.sum,
                                   "sum_squares": h.sum_squares,
                                   "bucket_limit": list(h.bucket_limit),
                                   "bucket": list(h.bucket)}
            out["values"] = vals
            plugins = plugin_values(ev.summary)
            if plugins:
                out["plugins"] = plugins
        print(json.dumps(out))


def event(step, wall, values):
    ev = pb.Event(wall_time=wall, step=step)
    for v in values:
        ev.summary.value.append(v)
    return frame(ev.SerializeToString())


def scalars_meta():
    return pb.SummaryMetadata(plugin_data=pb.SummaryMetadata.PluginData(plugin_name="scalars"))


def torch_form(path):
    """PyTorch's SummaryWriter: simple_value (add_scalar), or a DT_FLOAT or
    DT_DOUBLE tensor with the scalars plugin (new_style=True,
    double_precision=True); TensorFlow 2: a rank-0 tensor in tensor_content;
    with histograms, images and text beside them (no scalars)."""
    V = pb.Summary.Value
    out = frame(pb.Event(wall_time=1700000000.0, file_version="brain.Event:2").SerializeToString())
    for step in range(1, 4):
        loss = 1.0 / step
        out += event(step, 1700000000.0 + step, [
            V(tag="Loss/train", simple_value=loss)])
        out += event(step, 1700000000.5 + step, [
            V(tag="Loss/test", metadata=scalars_meta(),
              tensor=pb.TensorProto(dtype=pb.DT_FLOAT, float_val=[loss * 2]))])
        out += event(step, 1700000000.6 + step, [
            V(tag="lr", metadata=scalars_meta(),
              tensor=pb.TensorProto(dtype=pb.DT_DOUBLE, double_val=[0.1 / step]))])
        out += event(step, 1700000000.7 + step, [
            V(tag="epoch_accuracy", metadata=scalars_meta() if step == 1 else None,
              tensor=pb.TensorProto(dtype=pb.DT_FLOAT, tensor_shape=pb.TensorShapeProto(),
                                    tensor_content=struct.pack("<f", 0.25 * step)))])
        out += event(step, 1700000000.8 + step, [
            V(tag="weights", histo=pb.HistogramProto(min=0, max=1, num=2, bucket_limit=[1],
                                                     bucket=[2])),
            V(tag="note", metadata=pb.SummaryMetadata(
                plugin_data=pb.SummaryMetadata.PluginData(plugin_name="text")),
              tensor=pb.TensorProto(dtype=pb.DT_STRING, string_val=[b"hello"])),
            V(tag="picture", image=pb.Summary.Image(height=1, width=1,
                                                    encoded_image_string=b"x")),
            V(tag="hist2", tensor=pb.TensorProto(
                dtype=pb.DT_DOUBLE, tensor_shape=pb.TensorShapeProto(
                    dim=[pb.TensorShapeProto.Dim(size=2), pb.TensorShapeProto.Dim(size=3)]),
                double_val=[0, 1, 2, 3, 4, 5]))])
    open(path, "wb").write(out)


if __name__ == "__main__":
    {"dump": dump, "torch": torch_form}[sys.argv[1]](sys.argv[2])
