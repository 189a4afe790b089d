// Double.toString of each line of stdin, a double as its raw bits (a long): the digits of this JVM's Java.
public class ToString {
    public static void main(String[] args) throws Exception {
        var in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        var out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            out.append(Double.toString(Double.longBitsToDouble(Long.parseLong(line)))).append('\n');
        }
        System.out.print(out);
    }
}
