# The app icons (a sheep on the accent blue): `python3 gateways/web/ui/icons/make.py` writes them.
# Plain PNG written by hand, so no image library is needed.
import zlib, struct, math, sys
def png(size, path, maskable=False):
    bg=(0x2f,0x5f,0xd0); white=(255,255,255); dark=(0x1b,0x2a,0x4a)
    rows=[]
    r_corner = 0 if maskable else size*0.22
    # sheep: wool blob of circles, head
    s=size/512
    blobs=[(256,270,110),(180,250,70),(332,250,70),(200,320,70),(312,320,70),(256,200,72)]
    if maskable: blobs=[(256+(x-256)*0.8,256+(y-256)*0.8,r*0.8) for x,y,r in blobs]
    head=(256,300,52) if not maskable else (256,296,42)
    for y in range(size):
        row=bytearray([0])
        for x in range(size):
            px,py=(x+0.5)/s,(y+0.5)/s
            # rounded square mask
            inside=True; alpha=255
            if r_corner:
                cx=min(max(x+0.5,r_corner),size-r_corner); cy=min(max(y+0.5,r_corner),size-r_corner)
                d=math.hypot(x+0.5-cx,y+0.5-cy)
                if d>r_corner: inside=False
            c=bg
            if any(math.hypot(px-bx,py-by)<=br for bx,by,br in blobs): c=white
            if math.hypot(px-head[0],py-head[1])<=head[2]: c=dark
            # eyes
            for ex in (head[0]-18*(0.8 if maskable else 1), head[0]+18*(0.8 if maskable else 1)):
                if math.hypot(px-ex,py-(head[1]-8))<=7: c=white
            row+=bytes(c)+bytes([255 if inside else 0])
        rows.append(bytes(row))
    raw=b"".join(rows)
    def chunk(t,d): return struct.pack(">I",len(d))+t+d+struct.pack(">I",zlib.crc32(t+d)&0xffffffff)
    data=b"\x89PNG\r\n\x1a\n"+chunk(b"IHDR",struct.pack(">IIBBBBB",size,size,8,6,0,0,0))+chunk(b"IDAT",zlib.compress(raw,9))+chunk(b"IEND",b"")
    open(path,"wb").write(data)
png(192,"gateways/web/ui/icons/icon-192.png"); png(512,"gateways/web/ui/icons/icon-512.png"); png(512,"gateways/web/ui/icons/maskable-512.png",True)
